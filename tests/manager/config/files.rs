//! Configuration from a file: parse, validate with paths, round-trip.

use std::time::Duration;

use portcullis::builder::ManagerConfig;
use portcullis::error::RejectReason;
use portcullis::{Priority, ThrottleManager};

const ISSUE_EXAMPLE: &str = r#"
[default.rate]
starting_rate = 10
burst = 5
bounds = [1, 200]
increase_by = 1
decrease_by = 5
[default.throttle]
ratio = 2.0
window = "1m"
[overrides."api.github.com".bulkhead]
max_concurrent = 4
queue = 16
queue_timeout = "250ms"
"#;

fn problems(toml_text: &str) -> Vec<String> {
    let config: ManagerConfig = toml::from_str(toml_text).unwrap();
    ThrottleManager::<String>::builder()
        .config(config)
        .build()
        .unwrap_err()
        .problems()
        .iter()
        .map(|p| p.to_string())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_issue_example_builds_a_working_manager() {
    let config: ManagerConfig = toml::from_str(ISSUE_EXAMPLE).unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config)
        .build()
        .unwrap();
    // The rate: 10/s, burst 5, +1 on success.
    manager.increment("example.com");
    assert_eq!(manager.key("example.com").rate(), Some(11.0));
    // The override: api.github.com has a bulkhead of 4; other keys none.
    let permits: Vec<_> = (0..4)
        .map(|_| {
            manager
                .try_acquire("api.github.com", Priority::HIGH)
                .unwrap()
        })
        .collect();
    let _ = tokio::time::advance(Duration::from_secs(1)).await;
    let rejected = manager
        .try_acquire("api.github.com", Priority::HIGH)
        .unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::Full);
    assert_eq!(manager.key("example.com").snapshot().unwrap().active, None);
    drop(permits);
    // The throttle is there for every key.
    assert_eq!(
        manager
            .key("example.com")
            .rejection_probability(Priority::LOW),
        Some(0.0)
    );
}

#[test]
fn the_shipped_example_file_is_valid() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/portcullis.toml"
    ))
    .unwrap();
    let config: ManagerConfig = toml::from_str(&text).unwrap();
    assert!(
        ThrottleManager::<String>::builder()
            .config(config)
            .build()
            .is_ok()
    );
}

#[test]
fn every_problem_is_reported_with_its_path() {
    assert_eq!(
        problems(
            r#"
            [default.rate]
            starting_rate = 10
            burst = 0
            [default.bulkhead]
            max_concurrent = 8
            [overrides."api.github.com".bulkhead]
            max_concurrent = 0
            [overrides."api.github.com".rate]
            starting_rate = 5
            decrease_by = 1
            decrease_factor = 0.5
            [overrides."slow".throttle]
            min_rate = 0
            "#
        ),
        [
            "default.rate.burst: must be at least 1, got 0",
            r#"overrides."api.github.com".rate.decrease_factor: set one of decrease_by (additive) or decrease_factor (multiplicative), not both; got decrease_by 1 and decrease_factor 0.5"#,
            r#"overrides."slow".throttle.min_rate: must be above 0 (at 0 a failing key never recovers), got 0"#,
            r#"overrides."api.github.com".bulkhead.max_concurrent: must be at least 1, got 0"#,
        ]
    );
}

#[test]
fn unknown_fields_are_errors() {
    let err = toml::from_str::<ManagerConfig>("[default.rate]\nstarting_rate = 10\nburts = 5\n")
        .unwrap_err();
    assert!(err.to_string().contains("unknown field `burts`"), "{err}");
    let err = toml::from_str::<ManagerConfig>("[defaults.rate]\nstarting_rate = 10\n").unwrap_err();
    assert!(
        err.to_string().contains("unknown field `defaults`"),
        "{err}"
    );
}

#[test]
fn bad_durations_say_what_was_expected() {
    let err = toml::from_str::<ManagerConfig>("[default.throttle]\nwindow = \"1 fortnight\"\n")
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"(a duration like "250ms" or "1m")"#),
        "{err}"
    );
}

#[test]
fn configs_round_trip_through_toml() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/portcullis.toml"
    ))
    .unwrap();
    let config: ManagerConfig = toml::from_str(&text).unwrap();
    let written = toml::to_string(&config).unwrap();
    let reread: ManagerConfig = toml::from_str(&written).unwrap();
    assert_eq!(reread, config);
    assert_ne!(config, ManagerConfig::default());
}

#[tokio::test(start_paused = true)]
async fn max_wait_from_a_file_bounds_how_long_acquire_waits() {
    let config: ManagerConfig = toml::from_str(
        r#"
        max_wait = "150ms"
        max_wait_for = [{ priority = 0, max_wait = "1s" }]
        [default.rate]
        starting_rate = 10
        "#,
    )
    .unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config)
        .build()
        .unwrap();
    for _ in 0..2 {
        drop(manager.acquire("k", Priority::LOW).await.unwrap()); // neutral: the rate stays 10/s
    }
    // The bucket is empty (the last call came at 100 ms): the next token is
    // 100 ms away, but the one after lies 200 ms ahead.
    let (first, second) = tokio::join!(
        manager.acquire("k", Priority::LOW),
        manager.acquire("k", Priority::LOW)
    );
    assert!(first.is_ok());
    let rejected = second.unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::RateLimited);
    assert_eq!(rejected.retry_after(), Some(Duration::from_millis(200)));
    // HIGH calls (priority 0) may wait up to 1 s: the second waits 200 ms.
    let (first, second) = tokio::join!(
        manager.acquire("k", Priority::HIGH),
        manager.acquire("k", Priority::HIGH)
    );
    assert!(first.is_ok() && second.is_ok());
}

#[test]
fn max_wait_for_a_priority_the_manager_lacks_is_an_error() {
    let err = ThrottleManager::<String>::builder()
        .rate(portcullis::RateConfig::adaptive(10.0))
        .priority_levels(2)
        .time_limits(TimeLimits::new().max_wait_for(Priority::LOW, Duration::from_millis(100)))
        .build()
        .unwrap_err();
    assert_eq!(
        err.problems()[0].to_string(),
        "max_wait_for: priority 3 is out of range: the manager has 2 priority levels (0 to 1)"
    );
}

/// A file sets only what it has: each control set in code before `config`
/// stays when the file has none of it (it used to be kept for the rate and
/// wiped for the throttle and the bulkhead).
#[test]
fn a_control_set_in_code_survives_a_file_without_it() {
    use portcullis::{BulkheadConfig, RateConfig, ThrottleConfig};
    let file = |text: &str| -> ManagerConfig { toml::from_str(text).unwrap() };

    let rate = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .config(file("[default.bulkhead]\nmax_concurrent = 4"))
        .build()
        .unwrap();
    assert_eq!(rate.increment("api"), Some(11.0), "the rate set in code");

    let throttle = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .config(file("[default.rate]\nstarting_rate = 10"))
        .build()
        .unwrap();
    throttle.decrement("api");
    assert!(
        throttle
            .key("api")
            .rejection_probability(Priority::LOW)
            .is_some(),
        "the throttle set in code"
    );

    let bulkhead = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .config(file("[default.rate]\nstarting_rate = 10"))
        .build()
        .unwrap();
    let _busy = bulkhead.try_acquire("api", Priority::HIGH).unwrap();
    assert_eq!(
        bulkhead
            .try_acquire("api", Priority::HIGH)
            .unwrap_err()
            .reason(),
        RejectReason::Full,
        "the bulkhead set in code"
    );

    // What the file does set replaces the code's, and its errors name the
    // file's paths; a bad control set in code keeps its own name.
    let err = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(0))
        .config(file("[default.throttle]\nratio = 0.5"))
        .build()
        .unwrap_err();
    let fields: Vec<&str> = err.problems().iter().map(|p| p.field()).collect();
    assert_eq!(
        fields,
        ["default.throttle.ratio", "bulkhead.max_concurrent"]
    );
}

/// `bounds` is exactly two numbers, whatever the format: TOML used to drop
/// a third element without a word.
#[test]
fn bounds_take_exactly_two_numbers() {
    for text in [
        "starting_rate = 10\nbounds = [1, 20, \"junk\"]",
        "starting_rate = 10\nbounds = [1, 20, 30]",
        "starting_rate = 10\nbounds = [1]",
    ] {
        let error = toml::from_str::<portcullis::builder::RateSection>(text).unwrap_err();
        assert!(
            error.to_string().contains("exactly two numbers"),
            "{text}: {error}"
        );
    }
    let error = serde_json::from_str::<portcullis::builder::RateSection>(
        r#"{"starting_rate": 10, "bounds": [1, 20, 3]}"#,
    )
    .unwrap_err();
    assert!(error.to_string().contains("exactly two numbers"), "{error}");
    // The error says how many numbers there were.
    for (bounds, given) in [("[1, 20, 30]", 3), ("[1, 20, 30, 40, 50]", 5), ("[1]", 1)] {
        let text = format!("starting_rate = 10\nbounds = {bounds}");
        let error = toml::from_str::<portcullis::builder::RateSection>(&text).unwrap_err();
        assert!(
            error
                .to_string()
                .contains(&format!("invalid length {given},")),
            "{bounds}: {error}"
        );
    }
    let fine: portcullis::builder::RateSection =
        toml::from_str("starting_rate = 10\nbounds = [1, 20]").unwrap();
    assert_eq!(fine.bounds, Some([1.0, 20.0]));
}

/// Type errors name the field's path in any format (serde_json alone gave a
/// line and a column).
#[test]
fn a_type_error_names_the_fields_path() {
    let json = r#"{"overrides": {"api": {"bulkhead": {"max_concurrent": -4}}}}"#;
    let error = ManagerConfig::from_deserializer(&mut serde_json::Deserializer::from_str(json))
        .unwrap_err();
    assert_eq!(
        error.problems()[0].field(),
        "overrides.api.bulkhead.max_concurrent"
    );
    let toml = "[default.throttle]\nwindow = 60";
    let error =
        ManagerConfig::from_deserializer(toml::Deserializer::parse(toml).unwrap()).unwrap_err();
    assert_eq!(error.problems()[0].field(), "default.throttle.window");
}

/// An override may give its key a control the default lacks, as the
/// builder's `*_override` do; the docs say so.
#[test]
fn an_override_may_add_a_control_the_default_lacks() {
    let config: ManagerConfig = toml::from_str(
        "[default.rate]\nstarting_rate = 10\n[overrides.db.bulkhead]\nmax_concurrent = 2",
    )
    .unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config)
        .build()
        .unwrap();
    assert_eq!(manager.key("db").snapshot().map(|s| s.active), None);
    let _held = manager
        .try_acquire("db", portcullis::Priority::HIGH)
        .unwrap();
    assert_eq!(manager.key("db").snapshot().unwrap().active, Some(1));
    let other = manager
        .try_acquire("web", portcullis::Priority::HIGH)
        .unwrap();
    drop(other);
    assert_eq!(manager.key("web").snapshot().unwrap().active, None);
}

// ---- Tiers ----

use portcullis::builder::KeySpaceConfig;
use portcullis::builder::Tier;
use portcullis::deadline::TimeLimits;
use portcullis::{BulkheadConfig, RateConfig, ThrottleConfig};

fn tiered() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .bulkhead(BulkheadConfig::new(1))
        .key_override("premium-vip", Tier::new().rate(RateConfig::adaptive(500.0)))
        .tier(
            "premium",
            Tier::new()
                .rate(RateConfig::adaptive(100.0).burst(3))
                .throttle(ThrottleConfig::new())
                .bulkhead(BulkheadConfig::new(3)),
        )
        .tier_of(|tenant: &String| {
            if tenant.starts_with("premium-") {
                Some("premium")
            } else if tenant.starts_with("gold-") {
                Some("gold") // declared nowhere
            } else {
                None
            }
        })
        .build()
        .unwrap()
}

#[test]
fn a_tier_gives_its_keys_every_control_it_sets() {
    let manager = tiered();
    assert_eq!(manager.key("premium-1").rate(), None); // not live yet
    let held: Vec<_> = (0..3)
        .map(|_| manager.try_acquire("premium-1", Priority::HIGH).unwrap())
        .collect();
    let snapshot = manager.key("premium-1").snapshot().unwrap();
    assert_eq!(snapshot.rate, Some(100.0));
    assert_eq!(snapshot.concurrency_limit, Some(3));
    assert!(!snapshot.priorities.is_empty(), "the tier's throttle");
    drop(held);
    manager.check("free-1").unwrap();
    let free = manager.key("free-1").snapshot().unwrap();
    assert_eq!((free.rate, free.concurrency_limit), (Some(10.0), Some(1)));
    assert!(free.priorities.is_empty(), "no throttle outside the tier");
}

#[test]
fn an_exact_override_wins_over_the_tier() {
    let manager = tiered();
    manager.check("premium-vip").unwrap();
    let vip = manager.key("premium-vip").snapshot().unwrap();
    assert_eq!(vip.rate, Some(500.0));
    // The override is the rate's alone: the tier's bulkhead still applies.
    assert_eq!(vip.concurrency_limit, Some(3));
}

#[test]
fn a_tier_no_one_declared_gets_the_defaults() {
    let manager = tiered();
    manager.check("gold-1").unwrap();
    let gold = manager.key("gold-1").snapshot().unwrap();
    assert_eq!((gold.rate, gold.concurrency_limit), (Some(10.0), Some(1)));
}

#[test]
fn tiers_are_checked_at_build_with_their_names() {
    let fields = |builder: portcullis::builder::ThrottleManagerBuilder<String>| -> Vec<String> {
        builder
            .build()
            .unwrap_err()
            .problems()
            .iter()
            .map(|p| p.field().to_owned())
            .collect()
    };
    let base = || ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0));
    let bad = Tier::new()
        .rate(RateConfig::adaptive(10.0).burst(0))
        .bulkhead(BulkheadConfig::new(0));
    assert_eq!(
        fields(base().tier("premium", bad).tier_of(|_: &String| None)),
        [
            "tier[\"premium\"].rate.burst",
            "tier[\"premium\"].bulkhead.max_concurrent"
        ]
    );
    let unused = Tier::new().rate(RateConfig::adaptive(1.0));
    assert_eq!(fields(base().tier("premium", unused)), ["tier_of"]);
    assert_eq!(fields(base().tier_of(|_: &String| Some("x"))), ["tier_of"]);
}

#[test]
fn problems_in_the_keys_section_are_named_with_it() {
    assert_eq!(
        problems("[keys]\nmax_keys = 0\nidle_ttl = \"10ms\"\n[default.rate]\nstarting_rate = 10\n"),
        [
            "keys.idle_ttl: must be at least 1s (a shorter one forgets a key's learned rate between two of its calls), got 10ms",
            "keys.max_keys: must be at least 1, got 0",
        ]
    );
    // Set in code, they keep the builder's names.
    let error = ThrottleManager::<String>::builder()
        .rate(portcullis::RateConfig::adaptive(1.0))
        .key_space(KeySpaceConfig::new().max_keys(0))
        .build()
        .unwrap_err();
    assert_eq!(error.problems()[0].field(), "max_keys");
}

#[test]
fn a_quota_in_a_file_is_a_fixed_rate() {
    let config: ManagerConfig = toml::from_str(
        r#"
        [default.rate]
        quota = "600/min"
        burst = 20
        [overrides."batch".rate]
        quota = "100/10s"
        "#,
    )
    .unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config.clone())
        .clock(portcullis::clock::ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(
        (0..30).filter(|_| manager.check("tenant").is_ok()).count(),
        20
    );
    assert_eq!(manager.key("tenant").rate(), Some(10.0));
    assert_eq!(manager.decrement("tenant"), Some(10.0)); // fixed
    // The override's burst is its calls: 100 at once, at 10 a second.
    assert_eq!(
        (0..120).filter(|_| manager.check("batch").is_ok()).count(),
        100
    );
    // Written back, it reads as the same quota.
    let written = toml::to_string(&config).unwrap();
    assert!(written.contains(r#"quota = "600/1m""#), "{written}");
    assert_eq!(toml::from_str::<ManagerConfig>(&written).unwrap(), config);
}

#[test]
fn a_quota_given_adaptive_settings_or_a_starting_rate_is_refused_by_name() {
    assert_eq!(
        problems(
            r#"
            [default.rate]
            quota = "600/min"
            bounds = [1, 20]
            [overrides."a".rate]
            quota = "600/min"
            starting_rate = 10
            [overrides."b".rate]
            burst = 5
            [overrides."c".rate]
            quota = "0/min"
            "#
        ),
        [
            r#"overrides."a".rate: set one of starting_rate (an adaptive rate) or quota (a fixed one), not both"#,
            r#"overrides."b".rate: set starting_rate (an adaptive rate) or quota (a fixed one, like "600/min")"#,
            "default.rate.bounds: a fixed quota (600 per 1m) never moves; an adaptive rate starts from RateConfig::adaptive(calls_per_second)",
            r#"overrides."c".rate.quota: must allow at least 1 call, got 0 per 1m"#,
        ]
    );
    let err =
        toml::from_str::<ManagerConfig>("[default.rate]\nquota = \"600 a minute\"\n").unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"expected <calls>/<period>, like "600/min""#),
        "{err}"
    );
}

#[test]
fn tiers_from_a_file_give_the_keys_code_puts_in_them_their_controls() {
    let config: ManagerConfig = toml::from_str(
        r#"
        [default.rate]
        quota = "5/s"
        [tiers.pro.rate]
        quota = "50/s"
        burst = 20
        [tiers.pro.bulkhead]
        max_concurrent = 8
        "#,
    )
    .unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config.clone())
        .tier_of(|key: &String| key.starts_with("pro-").then_some("pro"))
        .clock(portcullis::clock::ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(
        (0..30)
            .filter(|_| manager.check("pro-carol").is_ok())
            .count(),
        20
    );
    assert_eq!(
        (0..30)
            .filter(|_| manager.check("free-bob").is_ok())
            .count(),
        5
    );
    assert_eq!(manager.key("pro-carol").rate(), Some(50.0));
    assert_eq!(manager.key("pro-carol").snapshot().unwrap().active, Some(0)); // its bulkhead
    assert_eq!(manager.key("free-bob").snapshot().unwrap().active, None); // none by default
    // Without code to say which key is in which tier, the file is refused.
    let err = ThrottleManager::<String>::builder()
        .config(config)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("call .tier_of(...)"), "{err}");
}

#[test]
fn a_tier_s_problems_are_named_by_where_the_file_declared_it() {
    let config: ManagerConfig = toml::from_str(
        r#"
        [tiers.free.rate]
        quota = "5/s"
        burst = 0
        [tiers.free.bulkhead]
        max_concurrent = 0
        [tiers.pro.rate]
        burst = 5
        "#,
    )
    .unwrap();
    let err = ThrottleManager::<String>::builder()
        .config(config)
        .tier_of(|_: &String| None)
        .build()
        .unwrap_err();
    let problems: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems,
        [
            r#"tiers."pro".rate: set starting_rate (an adaptive rate) or quota (a fixed one, like "600/min")"#,
            r#"tiers."free".rate.burst: must be at least 1, got 0"#,
            r#"tiers."free".bulkhead.max_concurrent: must be at least 1, got 0"#,
        ]
    );
}

#[test]
fn a_file_may_ask_for_a_learned_concurrency_limit() {
    let config: ManagerConfig = toml::from_str(
        r#"
        [default.bulkhead]
        adaptive = true
        bounds = [2, 64]
        probe_interval = "10s"
        probe_calls = 10
        queue = 32
        [overrides."db".bulkhead]
        max_concurrent = 4
        "#,
    )
    .unwrap();
    // Written back, it reads the same.
    let written = toml::to_string(&config).unwrap();
    assert_eq!(toml::from_str::<ManagerConfig>(&written).unwrap(), config);
    let manager = ThrottleManager::<String>::builder()
        .config(config)
        .build()
        .unwrap();
    // A learned limit starts by probing at its probe limit (2 by default);
    // the override is fixed.
    drop(manager.try_acquire("api", Priority::HIGH).unwrap());
    drop(manager.try_acquire("db", Priority::HIGH).unwrap());
    assert_eq!(manager.key("api").concurrency_limit(), Some(2));
    assert_eq!(manager.key("db").concurrency_limit(), Some(4));
}

#[test]
fn a_bulkhead_section_is_fixed_or_learned_and_says_which_field_is_wrong() {
    assert_eq!(
        problems(
            r#"
            [default.bulkhead]
            max_concurrent = 4
            adaptive = true
            [overrides."a".bulkhead]
            queue = 8
            [overrides."b".bulkhead]
            max_concurrent = 4
            probe_calls = 10
            [overrides."c".bulkhead]
            adaptive = true
            bounds = [10, 5]
            "#
        ),
        [
            "default.bulkhead: set one of max_concurrent (a fixed limit) or adaptive = true (a learned one), not both",
            r#"overrides."a".bulkhead: set max_concurrent (a fixed limit) or adaptive = true (a learned one)"#,
            r#"overrides."b".bulkhead.probe_calls: only for a learned limit (BulkheadConfig::adaptive), not a fixed one"#,
            r#"overrides."c".bulkhead.bounds: the lower bound must not exceed the upper, got 10 and 5"#,
        ]
    );
    let err = toml::from_str::<ManagerConfig>(
        "[default.bulkhead]\nadaptive = true\nbounds = [1, 2, 3]\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("exactly two numbers"), "{err}");
}

#[test]
fn a_name_given_twice_is_refused_in_every_format_with_its_path() {
    // The path is the table's, the message names the name (as serde names
    // a field given twice).
    // The one problem of a JSON file: its path and its message.
    let json_problem = |json: &str| {
        let error = ManagerConfig::from_deserializer(&mut serde_json::Deserializer::from_str(json))
            .unwrap_err();
        let problem = &error.problems()[0];
        (problem.field().to_owned(), problem.message().to_owned())
    };
    let (field, message) = json_problem(
        r#"{"tiers": {"gold": {"rate": {"starting_rate": 50}}, "gold": {"rate": {"starting_rate": 5}}}}"#,
    );
    assert_eq!(field, "tiers");
    assert!(message.contains("\"gold\" is given twice"), "{message}");
    let (field, message) = json_problem(r#"{"overrides": {"api": {}, "web": {}, "api": {}}}"#);
    assert_eq!(field, "overrides");
    assert!(message.contains("\"api\" is given twice"), "{message}");

    // TOML refuses it too, and so does a field given twice.
    let toml = "[tiers.gold.rate]\nstarting_rate = 5\n[tiers.gold.rate]\nstarting_rate = 6\n";
    assert!(toml::from_str::<ManagerConfig>(toml).is_err());
    let (field, message) =
        json_problem(r#"{"default": {"rate": {"starting_rate": 5, "starting_rate": 6}}}"#);
    assert_eq!(field, "default.rate");
    assert!(message.contains("starting_rate"), "{message}");
    // Distinct names are kept, each.
    let json = r#"{"tiers": {"gold": {}, "free": {}}}"#;
    let config =
        ManagerConfig::from_deserializer(&mut serde_json::Deserializer::from_str(json)).unwrap();
    assert_eq!(config.tiers.len(), 2);
    // Tiers or overrides that are no table say what was expected.
    let (field, message) = json_problem(r#"{"tiers": 5}"#);
    assert_eq!(field, "tiers");
    assert!(message.contains("expected a table of names"), "{message}");
}
