//! Validation's messages and the defaults of `RateConfig`.

use super::*;

fn fields(config: RateConfig) -> Vec<String> {
    config
        .validate()
        .unwrap_err()
        .problems()
        .iter()
        .map(|p| p.to_string())
        .collect()
}

#[test]
fn every_bad_value_is_named_with_its_field_and_value() {
    assert_eq!(
        fields(RateConfig::adaptive(10.0).burst(0)),
        ["rate.burst: must be at least 1, got 0"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(f64::INFINITY).bounds(1.0, 20.0)),
        ["rate.starting_rate: must be a finite number, got inf"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(-1.0).bounds(1.0, 20.0)),
        ["rate.starting_rate: must be above 0, got -1"]
    );
    // Bounds derived from a bad starting rate are not the user's to fix.
    assert_eq!(
        fields(RateConfig::adaptive(-1.0)),
        ["rate.starting_rate: must be above 0, got -1"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(10.0).bounds(20.0, 1.0)),
        ["rate.bounds: lower bound must not exceed upper bound, got [20, 1]"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(30.0).bounds(1.0, 20.0)),
        ["rate.starting_rate: must lie within the bounds [1, 20], got 30"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(10.0).bounds(0.0, 20.0)),
        ["rate.lower_bound: must be above 0, got 0"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(10.0).bounds(1.0, 2e9)),
        ["rate.upper_bound: must be at most 1000000000 (one call per nanosecond), got 2000000000"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(10.0).increase_by(f64::NAN)),
        ["rate.increase_by: must be a finite number of at least 0, got NaN"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(10.0).decrease_by(-1.0)),
        ["rate.decrease_by: must be a finite number of at least 0, got -1"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(10.0).decrease_factor(1.5)),
        ["rate.decrease_factor: must be above 0 and at most 1, got 1.5"]
    );
    assert_eq!(
        fields(RateConfig::adaptive(10.0).decrease_factor(0.0)),
        ["rate.decrease_factor: must be above 0 and at most 1, got 0"]
    );
}

#[test]
fn defaults_follow_the_starting_rate() {
    let config = RateConfig::adaptive(10.0);
    assert_eq!(config.lower_bound(), 1.0);
    assert_eq!(config.upper_bound(), crate::rate::MAX_RATE);
    assert!(config.learns());
    assert_eq!(config.decrease(), Decrease::Multiply(0.7));
    assert_eq!(config.cooldown(), Duration::from_millis(50));
    // A start far above a host's capacity can come down to 1/s.
    assert_eq!(RateConfig::adaptive(500.0).lower_bound(), 1.0);
    assert_eq!(RateConfig::adaptive(2.0).lower_bound(), 0.2);
    // A step the user sets keeps its meaning, and so does a factor.
    assert!(!RateConfig::adaptive(10.0).increase_by(0.3).learns());
    assert_eq!(
        RateConfig::adaptive(10.0).decrease_factor(0.7).cooldown(),
        Duration::from_millis(500)
    );
    assert_eq!(
        RateConfig::adaptive(10.0).decrease_by(1.0).cooldown(),
        Duration::ZERO
    );
}
