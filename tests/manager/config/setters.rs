//! No setter undoes another in silence: two setters of one quantity,
//! both set, are an error at `build()` naming both, whichever came last.

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::builder::ManagerConfig;
use portcullis::{RateConfig, ThrottleManager};

fn build_error(builder: portcullis::builder::ThrottleManagerBuilder<String>) -> String {
    builder.build().unwrap_err().to_string()
}

#[test]
fn a_rate_given_both_ways_down_is_refused_naming_both() {
    for config in [
        RateConfig::adaptive(10.0)
            .decrease_by(1.0)
            .decrease_factor(0.5),
        RateConfig::adaptive(10.0)
            .decrease_factor(0.5)
            .decrease_by(1.0),
    ] {
        let error = build_error(ThrottleManager::builder().rate(config));
        assert!(
            error.contains(
                "rate.decrease_factor: set one of decrease_by (additive) or decrease_factor \
                 (multiplicative), not both; got decrease_by 1 and decrease_factor 0.5"
            ),
            "{error}"
        );
    }
    // Either alone is a way down.
    for config in [
        RateConfig::adaptive(10.0).decrease_by(1.0),
        RateConfig::adaptive(10.0).decrease_factor(0.5),
    ] {
        ThrottleManager::<String>::builder()
            .rate(config)
            .build()
            .unwrap();
    }
}

#[test]
fn an_idle_ttl_and_keeping_idle_keys_are_refused_together() {
    let both = [
        ThrottleManager::<String>::builder().key_space(
            KeySpaceConfig::new()
                .idle_ttl(Duration::from_secs(60))
                .keep_idle_keys(),
        ),
        ThrottleManager::<String>::builder()
            .key_space(KeySpaceConfig::new().keep_idle_keys())
            .key_space(KeySpaceConfig::new().idle_ttl(Duration::from_secs(60))),
    ];
    for builder in both {
        let error = build_error(builder);
        assert!(
            error.contains(
                "idle_ttl: set one of idle_ttl (forget keys idle that long) or keep_idle_keys \
                 (never forget them), not both; got idle_ttl 60s and keep_idle_keys"
            ),
            "{error}"
        );
    }
}

#[test]
fn a_file_s_idle_ttl_and_code_that_keeps_idle_keys_are_refused_together() {
    let file: ManagerConfig = toml::from_str("[keys]\nidle_ttl = \"5m\"").unwrap();
    let error = build_error(
        ThrottleManager::builder()
            .config(file)
            .key_space(KeySpaceConfig::new().keep_idle_keys()),
    );
    assert!(
        error.contains("keys.idle_ttl: set one of idle_ttl"),
        "{error}"
    );
}
