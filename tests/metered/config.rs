//! Named limits configured as the rate is: in code, in tiers, per key, and
//! in a file, every bad setting named by its place.

use portcullis::builder::{ManagerConfig, Tier};
use portcullis::{RateConfig, ThrottleManager};

/// What `build` says, a line a problem.
fn problems(built: Result<ThrottleManager<String>, portcullis::error::ConfigError>) -> Vec<String> {
    let error = built.expect_err("refused");
    error.problems().iter().map(ToString::to_string).collect()
}

fn burst(manager: &ThrottleManager<String>, key: &str) -> u32 {
    let tokens = manager.limit("tokens").unwrap();
    tokens.check(key).unwrap();
    tokens.peek(key).unwrap().burst
}

const FILE: &str = r#"
[default.rate]
quota = "500/min"
[default.limits.tokens]
quota = "30000/min"
burst = 5000
[tiers.scale.limits.tokens]
quota = "2000000/min"
burst = 200000
[overrides."acct-big".limits.tokens]
quota = "300000/min"
burst = 50000
"#;

#[test]
fn a_file_sets_a_limit_for_every_key_a_tier_and_one_key() {
    let config: ManagerConfig = toml::from_str(FILE).unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config)
        .tier_of(|key: &String| key.starts_with("scale-").then_some("scale"))
        .build()
        .unwrap();
    assert_eq!(burst(&manager, "acct-1"), 5_000);
    assert_eq!(burst(&manager, "scale-1"), 200_000);
    assert_eq!(burst(&manager, "acct-big"), 50_000);
}

#[test]
fn code_sets_a_limit_for_a_tier_and_one_key() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(500))
        .limit("tokens", RateConfig::per_minute(30_000).burst(5_000))
        .tier(
            "scale",
            Tier::new().limit("tokens", RateConfig::per_minute(2_000_000).burst(200_000)),
        )
        .tier_of(|key: &String| key.starts_with("scale-").then_some("scale"))
        .key_override(
            "acct-big".to_owned(),
            Tier::new().limit("tokens", RateConfig::per_minute(300_000).burst(50_000)),
        )
        .build()
        .unwrap();
    assert_eq!(burst(&manager, "acct-1"), 5_000);
    assert_eq!(burst(&manager, "scale-1"), 200_000);
    assert_eq!(burst(&manager, "acct-big"), 50_000);
}

#[test]
fn every_bad_limit_is_named_by_its_place() {
    let file = ["burst = 50000", "burst = 200000", "burst = 5000"]
        .iter()
        .fold(FILE.to_owned(), |file, burst| {
            file.replace(burst, "burst = 0")
        });
    let config: ManagerConfig = toml::from_str(&file).unwrap();
    let built = ThrottleManager::<String>::builder()
        .config(config)
        .tier_of(|key: &String| key.starts_with("scale-").then_some("scale"))
        .build();
    let found = problems(built);
    let mut fields: Vec<&str> = found
        .iter()
        .map(|line| line.split(':').next().unwrap())
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            r#"default.limits."tokens".burst"#,
            r#"overrides."acct-big".limits."tokens".burst"#,
            r#"tiers."scale".limits."tokens".burst"#,
        ],
        "{found:#?}"
    );
    let built = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(500))
        .limit("tokens", RateConfig::per_minute(30_000).burst(0))
        .tier(
            "scale",
            Tier::new().limit("images", RateConfig::per_minute(10)),
        )
        .tier_of(|key: &String| key.starts_with("scale-").then_some("scale"))
        .key_override(
            "acct-big".to_owned(),
            Tier::new().limit("tokens", RateConfig::per_minute(300_000).burst(0)),
        )
        .key_override(
            "acct-big".to_owned(),
            Tier::new().limit("imgs", RateConfig::per_minute(10)),
        )
        .build();
    let found = problems(built);
    let fields: Vec<&str> = found
        .iter()
        .map(|line| line.split(':').next().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            r#"tier["scale"].limit["images"]"#,
            r#"limit_override["imgs"]"#,
            r#"limit["tokens"].burst"#,
            r#"limit_override["tokens"].burst"#,
        ],
        "{found:#?}"
    );
}

#[test]
fn a_reloaded_file_moves_each_limit_and_refuses_a_new_one() {
    let config: ManagerConfig = toml::from_str(FILE).unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config)
        .tier_of(|key: &String| key.starts_with("scale-").then_some("scale"))
        .build()
        .unwrap();
    assert_eq!(burst(&manager, "acct-1"), 5_000);
    assert_eq!(burst(&manager, "scale-1"), 200_000);
    let changed = FILE
        .replace("burst = 5000\n", "burst = 6000\n")
        .replace("burst = 200000", "burst = 250000");
    manager.reload(toml::from_str(&changed).unwrap()).unwrap();
    assert_eq!(burst(&manager, "acct-1"), 6_000);
    assert_eq!(burst(&manager, "scale-1"), 250_000);
    assert_eq!(burst(&manager, "acct-big"), 50_000);
    // A limit the manager was built without, and a bad one: nothing applied.
    let refused = format!("{changed}\n[default.limits.images]\nquota = \"10/min\"\n")
        .replace("burst = 250000", "burst = 0");
    let error = manager
        .reload(toml::from_str(&refused).unwrap())
        .unwrap_err();
    let fields: Vec<&str> = error
        .problems()
        .iter()
        .map(|problem| problem.field())
        .collect();
    assert_eq!(
        fields,
        [
            r#"default.limits."images""#,
            r#"tiers."scale".limits."tokens".burst"#
        ],
        "{error}"
    );
    assert_eq!(burst(&manager, "acct-1"), 6_000);
}

#[test]
fn retier_moves_a_keys_named_limits_with_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SCALE: AtomicBool = AtomicBool::new(false);
    let config: ManagerConfig = toml::from_str(FILE).unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config)
        .tier_of(|_| SCALE.load(Ordering::Relaxed).then_some("scale"))
        .build()
        .unwrap();
    assert_eq!(burst(&manager, "acct-1"), 5_000);
    SCALE.store(true, Ordering::Relaxed); // acct-1 upgraded
    manager.key("acct-1").retier();
    let tokens = manager.limit("tokens").unwrap();
    assert_eq!(tokens.peek("acct-1").unwrap().burst, 200_000);
}
