//! The page in a real headless Chromium (the distribution's package): it
//! loads without errors, shows the shedding key first, and draws its
//! charts; a screenshot is written next to the test's output.
//!
//! Without a browser the test says it was skipped and why, unless
//! `PORTCULLIS_REQUIRE_BROWSER` is set (as `.ci/run` sets it, after
//! installing Chromium).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use portcullis::status::StatusPage;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

use crate::serve;

/// The browser: the first of Debian's, Ubuntu's and Google's names on the
/// PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs the headless browser on `url` with `args`, letting the page's
/// clock run `budget` of virtual time (its timers and fetches) first.
async fn headless(browser: &Path, url: &str, budget: Duration, args: &[&str]) -> Output {
    let profile = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(browser);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg("--no-first-run")
        .arg("--enable-logging=stderr")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={}", budget.as_millis()))
        .args(args)
        .arg(url)
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the browser did not finish within two minutes")
        .expect("the browser could not be started")
}

/// The console's messages the browser logged (`--enable-logging=stderr`
/// prints each as a `CONSOLE` line).
fn console_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.contains("CONSOLE"))
        .map(str::to_owned)
        .collect()
}

/// The value of `attribute` on the first element whose opening tag
/// contains `marker`.
fn attribute<'a>(dom: &'a str, marker: &str, attribute: &str) -> Option<&'a str> {
    let at = dom.find(marker)?;
    let start = dom[..=at].rfind('<')?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let value_at = tag.find(&format!("{attribute}=\""))? + attribute.len() + 2;
    Some(&tag[value_at..value_at + tag[value_at..].find('"')?])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_the_page_shows_the_shedding_key_first_and_draws_its_charts() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("PORTCULLIS_REQUIRE_BROWSER").is_none(),
            "PORTCULLIS_REQUIRE_BROWSER is set but no chromium is on the PATH"
        );
        eprintln!("skipped: no chromium, chromium-browser or google-chrome on the PATH");
        return;
    };
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(20.0)
                .bounds(1.0, 100.0)
                .increase_by(2.0),
        )
        .throttle(ThrottleConfig::new())
        .bulkhead(BulkheadConfig::new(2).queue(4))
        .key_names(|host: &String| host.clone())
        .name("crawler")
        .build()
        .unwrap();
    let page = StatusPage::builder(&manager)
        .sample_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let base = serve(axum::Router::new().nest("/status", page.router())).await;
    // Over a second and a half of samples: a host whose calls fail (its
    // rate falls, its throttle sheds), one whose calls succeed (its rate
    // rises), and a database whose two slots are held with a call queued.
    let held = [
        manager.acquire("orders-db", Priority::HIGH).await.unwrap(),
        manager.acquire("orders-db", Priority::HIGH).await.unwrap(),
    ];
    let queued = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire("orders-db", Priority::LOW).await.map(drop) })
    };
    for round in 0..75 {
        if let Ok(permit) = manager.try_acquire("payments.example.com", Priority::LOW) {
            permit.overloaded();
        }
        if round % 5 == 0 {
            if let Ok(permit) = manager.try_acquire("search.example.com", Priority::HIGH) {
                permit.success();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let url = format!("{base}/status");
    let dumped = headless(&browser, &url, Duration::from_secs(3), &["--dump-dom"]).await;
    let dom = String::from_utf8_lossy(&dumped.stdout);
    assert!(dumped.status.success(), "the browser failed: {dumped:?}");
    assert_eq!(
        console_lines(&dumped),
        Vec::<String>::new(),
        "console messages"
    );
    assert_eq!(
        attribute(&dom, "<body", "data-errors"),
        None,
        "errors on the page"
    );
    assert_eq!(
        attribute(&dom, "<body", "data-ready"),
        Some("true"),
        "{dom}"
    );
    let first_refused = dom
        .find("id=\"top-refusals\"")
        .and_then(|at| attribute(&dom[at..], "class=\"key", "data-key"));
    assert_eq!(first_refused, Some("payments.example.com"), "{dom}");
    for chart in ["chart-rate", "chart-shedding", "chart-concurrency"] {
        let points: usize = attribute(&dom, &format!("id=\"{chart}\""), "data-points")
            .unwrap()
            .parse()
            .unwrap();
        assert!(points > 0, "{chart} drew no points");
    }

    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let shot = headless(
        &browser,
        &url,
        Duration::from_secs(3),
        &[
            &format!("--screenshot={}", screenshot.display()),
            "--window-size=1280,900",
        ],
    )
    .await;
    assert!(shot.status.success(), "the browser failed: {shot:?}");
    let png = std::fs::read(&screenshot).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    println!("screenshot: {}", screenshot.display());

    drop(held);
    queued.await.unwrap().unwrap();
}
