//! Configuration fuzzing, bounded so that it runs with every `cargo test`:
//! random bytes, and random but well-formed files full of hostile values,
//! through the loader and the builder. Nothing panics, every error names a
//! field, and every manager that builds admits a call.
//!
//! More cases: `PROPTEST_CASES=100000 cargo test --test manager config::fuzz::`.

use portcullis::builder::ManagerConfig;
use portcullis::{Priority, ThrottleManager};
use proptest::prelude::*;

/// Numbers a config should survive: ordinary, zero, negative, tiny, huge,
/// not finite, out of every integer range.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..1_000).prop_map(|n| n.to_string()),
        (-1_000i64..1_000).prop_map(|n| n.to_string()),
        (0.0f64..1_000.0).prop_map(|n| format!("{n:?}")),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("1e-300".to_string()),
        Just("1e300".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        Just("4294967296".to_string()),
        Just("18446744073709551615".to_string()),
        Just("\"ten\"".to_string()),
    ]
}

fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"0s\"".to_string()),
        Just("\"1ns\"".to_string()),
        Just("\"250ms\"".to_string()),
        Just("\"1m\"".to_string()),
        Just("\"100000000h\"".to_string()),
        Just("\"soon\"".to_string()),
        Just("\"-1s\"".to_string()),
        Just("12".to_string()),
    ]
}

fn rate_section() -> impl Strategy<Value = String> {
    (
        number(),
        proptest::option::of(number()),
        proptest::option::of((number(), number())),
        proptest::option::of(number()),
        proptest::option::of(number()),
        proptest::option::of(duration()),
    )
        .prop_map(|(start, burst, bounds, increment, factor, cooldown)| {
            let mut text = format!("starting_rate = {start}\n");
            if let Some(burst) = burst {
                text += &format!("burst = {burst}\n");
            }
            if let Some((lower, upper)) = bounds {
                text += &format!("bounds = [{lower}, {upper}]\n");
            }
            if let Some(increment) = increment {
                text += &format!("increase_by = {increment}\n");
            }
            if let Some(factor) = factor {
                text += &format!("decrease_factor = {factor}\n");
            }
            if let Some(cooldown) = cooldown {
                text += &format!("decrease_cooldown = {cooldown}\n");
            }
            text
        })
}

fn throttle_section() -> impl Strategy<Value = String> {
    (number(), number(), duration(), number(), number()).prop_map(
        |(ratio, min_rate, window, min_requests, max_rejection)| {
            format!(
                "ratio = {ratio}\nmin_rate = {min_rate}\nwindow = {window}\n\
                 min_requests = {min_requests}\nmax_rejection = {max_rejection}\n"
            )
        },
    )
}

fn bulkhead_section() -> impl Strategy<Value = String> {
    (number(), number(), duration()).prop_map(|(max, queue, timeout)| {
        format!("max_concurrent = {max}\nqueue = {queue}\nqueue_timeout = {timeout}\n")
    })
}

fn file() -> impl Strategy<Value = String> {
    (
        proptest::option::of(rate_section()),
        proptest::option::of(throttle_section()),
        proptest::option::of(bulkhead_section()),
        proptest::option::of(bulkhead_section()),
        proptest::option::of((number(), duration())),
        proptest::option::of(number()),
        proptest::option::of(duration()),
    )
        .prop_map(
            |(rate, throttle, bulkhead, override_bulkhead, keys, levels, max_wait)| {
                let mut text = String::new();
                if let Some(levels) = levels {
                    text += &format!("priority_levels = {levels}\n");
                }
                if let Some(max_wait) = max_wait {
                    text += &format!("max_wait = {max_wait}\n");
                }
                if let Some(rate) = rate {
                    text += &format!("[default.rate]\n{rate}");
                }
                if let Some(throttle) = throttle {
                    text += &format!("[default.throttle]\n{throttle}");
                }
                if let Some(bulkhead) = bulkhead {
                    text += &format!("[default.bulkhead]\n{bulkhead}");
                }
                if let Some(bulkhead) = override_bulkhead {
                    text += &format!("[overrides.\"api\".bulkhead]\n{bulkhead}");
                }
                if let Some((max_keys, idle_ttl)) = keys {
                    text += &format!("[keys]\nmax_keys = {max_keys}\nidle_ttl = {idle_ttl}\n");
                }
                text
            },
        )
}

/// Every error names a field (the root, for a file that does not parse).
fn assert_named(error: &portcullis::error::ConfigError) -> Result<(), TestCaseError> {
    prop_assert!(!error.problems().is_empty());
    for problem in error.problems() {
        prop_assert!(!problem.field().is_empty(), "no field in {error}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_through_every_loader_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(deserializer) = toml::Deserializer::parse(&text) {
            if let Err(error) = ManagerConfig::from_deserializer(deserializer) {
                assert_named(&error)?;
            }
        }
        let mut json = serde_json::Deserializer::from_str(&text);
        if let Err(error) = ManagerConfig::from_deserializer(&mut json) {
            assert_named(&error)?;
        }
    }

    #[test]
    fn hostile_values_are_named_or_build_a_working_manager(text in file()) {
        let deserializer = toml::Deserializer::parse(&text).expect("the generator writes valid TOML");
        let config = match ManagerConfig::from_deserializer(deserializer) {
            Ok(config) => config,
            Err(error) => return assert_named(&error),
        };
        match ThrottleManager::<String>::builder().config(config).build() {
            Ok(manager) => {
                // Whatever it allowed, it works: a call, an outcome, a look.
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    if let Ok(permit) = manager.try_acquire("api", Priority::HIGH) {
                        permit.overloaded();
                    }
                    let _ = manager.try_acquire("web", Priority::LOW);
                    let _ = manager.key("api").snapshot();
                });
            }
            Err(error) => assert_named(&error)?,
        }
    }
}
