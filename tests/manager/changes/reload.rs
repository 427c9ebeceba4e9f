//! The whole file applied to a live manager: tiers and defaults move their
//! keys at their next call; what a live manager cannot change is refused
//! by its path, and nothing is applied then.

use portcullis::builder::{ManagerConfig, Tier};
use portcullis::clock::ManualClock;
use portcullis::{Priority, RateConfig, ThrottleManager};

fn file(text: &str) -> ManagerConfig {
    toml::from_str(text).unwrap()
}

fn tiered() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .config(file(
            "[default.rate]\nquota = \"10/s\"\n[tiers.premium.rate]\nquota = \"100/s\"\n",
        ))
        .tier_of(|key: &String| key.starts_with("premium-").then_some("premium"))
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn a_reloaded_tier_moves_its_keys_at_their_next_call() {
    let manager = tiered();
    for key in ["premium-1", "free-1"] {
        manager.check(key).unwrap();
    }
    assert_eq!(manager.key("premium-1").rate(), Some(100.0));

    manager
        .reload(file(
            "[default.rate]\nquota = \"10/s\"\n[tiers.premium.rate]\nquota = \"200/s\"\n",
        ))
        .unwrap();
    assert_eq!(
        manager.key("premium-1").rate(),
        Some(100.0),
        "not before its next call"
    );
    let _ = manager.check("premium-1");
    let _ = manager.check("free-1");
    assert_eq!(manager.key("premium-1").rate(), Some(200.0));
    assert_eq!(manager.key("free-1").rate(), Some(10.0));
    let _ = manager.check("premium-2");
    assert_eq!(manager.key("premium-2").rate(), Some(200.0), "a new key");
}

#[test]
fn a_reload_replaces_the_overrides_and_keeps_what_the_file_leaves_out() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .key_override("acme", Tier::new().rate(RateConfig::per_second(50)))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    manager
        .key("globex")
        .set_rate(RateConfig::per_second(70))
        .unwrap();
    manager
        .reload(file("[overrides.initech.rate]\nquota = \"30/s\"\n"))
        .unwrap();
    for (key, rate) in [("acme", 10.0), ("globex", 10.0), ("initech", 30.0)] {
        let _ = manager.check(key);
        assert_eq!(manager.key(key).rate(), Some(rate), "{key}");
    }
}

#[test]
fn what_a_live_manager_cannot_change_is_refused_by_path_and_nothing_is_applied() {
    let manager = tiered();
    let _ = manager.check("free-1");
    let error = manager
        .reload(file(
            "priority_levels = 8\n\
             [keys]\nmax_keys = 5\n\
             [default.rate]\nquota = \"20/s\"\n\
             [default.bulkhead]\nmax_concurrent = 4\n",
        ))
        .unwrap_err();
    let fields: Vec<&str> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(
        fields,
        ["priority_levels", "keys.max_keys", "default.bulkhead"],
        "{error}"
    );
    let _ = manager.check("free-1");
    assert_eq!(
        manager.key("free-1").rate(),
        Some(10.0),
        "the valid rate was not applied either"
    );

    let error = manager
        .reload(file("[default.rate]\nquota = \"0/s\"\n"))
        .unwrap_err();
    assert!(
        error.problems()[0].field().starts_with("default.rate"),
        "{error}"
    );
    // The same values as the manager's are no change.
    manager.reload(file("priority_levels = 4\n")).unwrap();
}

#[test]
fn tiers_need_a_manager_that_puts_keys_in_them() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .build()
        .unwrap();
    let error = manager
        .reload(file("[tiers.premium.rate]\nquota = \"100/s\"\n"))
        .unwrap_err();
    assert_eq!(error.problems()[0].field(), "tiers");
}

#[test]
fn retier_moves_a_key_to_the_tier_it_is_in_now() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static UPGRADED: AtomicBool = AtomicBool::new(false);
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10).burst(1))
        .tier(
            "premium",
            Tier::new().rate(RateConfig::per_second(100).burst(1)),
        )
        .tier_of(|_| UPGRADED.load(Ordering::Relaxed).then_some("premium"))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(manager.try_acquire("acme", Priority::HIGH).is_ok());
    UPGRADED.store(true, Ordering::Relaxed);
    assert_eq!(manager.key("acme").rate(), Some(10.0), "asked once");
    manager.key("acme").retier();
    assert_eq!(manager.key("acme").rate(), Some(100.0));
    assert!(
        manager.try_acquire("acme", Priority::HIGH).is_err(),
        "its bucket kept: the burst already spent"
    );
}

/// A plans file of `keys` per-key quotas, key `k` at `(k + offset)/s`.
fn plans(keys: u32, offset: u32) -> ManagerConfig {
    let mut text = String::from("[default.rate]\nquota = \"1/s\"\n");
    for k in 0..keys {
        let rate = k + offset;
        text.push_str(&format!(
            "[overrides.\"user-{k}\".rate]\nquota = \"{rate}/s\"\n"
        ));
    }
    file(&text)
}

/// Issue 80: a reload that could take the settings table past what
/// changes may fill is refused, as an override is, with its `settings`
/// path and nothing applied; so no key is ever given another key's
/// settings. The same file reloaded adds nothing and is always taken.
#[test]
fn a_reload_that_would_fill_the_settings_table_is_refused_and_keys_keep_their_own() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    manager.reload(plans(20_000, 100)).unwrap();
    manager.reload(plans(20_000, 100)).unwrap(); // unchanged: nothing new
    let refused = manager.reload(plans(20_000, 50_000)).unwrap_err();
    assert_eq!(refused.problems()[0].field(), "settings", "{refused}");
    for k in [0, 7_777, 19_999] {
        let key = format!("user-{k}");
        manager.check(&key).unwrap();
        let own = f64::from(k + 100);
        assert_eq!(manager.key(&key).rate(), Some(own), "{key}");
    }
}
