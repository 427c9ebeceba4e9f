//! Every field of the file format reaches the builder: set to two different
//! values, a field makes two different builders. The fields come from the
//! format's own types (what serde asks a file for), so a field added to
//! the format without a row here fails the test.

use std::collections::BTreeSet;

use portcullis::ThrottleManager;
use portcullis::builder::ManagerConfig;
use portcullis::builder::{
    BulkheadSection, Controls, KeysSection, PriorityWait, RateSection, ThrottleSection,
};
use serde::de::{self, Deserialize, Deserializer, Visitor};

/// A deserializer that only records the fields a struct asks for.
struct FieldNames(std::cell::RefCell<Vec<&'static str>>);

#[derive(Debug)]
struct Recorded;

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("recorded")
    }
}

impl std::error::Error for Recorded {}

impl de::Error for Recorded {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Recorded
    }
}

impl<'de> Deserializer<'de> for &FieldNames {
    type Error = Recorded;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Recorded> {
        Err(Recorded)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Recorded> {
        self.0.borrow_mut().extend_from_slice(fields);
        Err(Recorded)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The fields `T` reads from a file.
fn fields_of<T: for<'de> Deserialize<'de>>() -> Vec<&'static str> {
    let names = FieldNames(std::cell::RefCell::new(Vec::new()));
    let _ = T::deserialize(&names);
    names.0.into_inner()
}

/// Every leaf of the format, by its path in a file: the sections' fields
/// under `default`, the maps of overrides and tiers as one leaf each (their
/// entries are sections, checked under `default`).
fn leaves() -> BTreeSet<String> {
    let mut leaves = BTreeSet::new();
    for field in fields_of::<ManagerConfig>() {
        match field {
            "default" => {
                for control in fields_of::<Controls>() {
                    if control == "shadow" {
                        leaves.insert("default.shadow".to_owned());
                        continue;
                    }
                    // A map of rate sections by limit, one leaf: its
                    // entries' fields are the rate's, checked above.
                    if control == "limits" {
                        leaves.insert("default.limits".to_owned());
                        continue;
                    }
                    let inner = match control {
                        "rate" => fields_of::<RateSection>(),
                        "throttle" => fields_of::<ThrottleSection>(),
                        "bulkhead" => fields_of::<BulkheadSection>(),
                        other => panic!("a control this test does not know: {other}"),
                    };
                    for name in inner {
                        leaves.insert(format!("default.{control}.{name}"));
                    }
                }
            }
            "keys" => {
                for name in fields_of::<KeysSection>() {
                    leaves.insert(format!("keys.{name}"));
                }
            }
            "max_wait_for" => {
                for name in fields_of::<PriorityWait>() {
                    leaves.insert(format!("max_wait_for.{name}"));
                }
            }
            other => {
                leaves.insert(other.to_owned());
            }
        }
    }
    leaves
}

/// Per leaf, two files that differ in that field alone.
const ROWS: &[(&str, &str, &str)] = &[
    (
        "default.rate.starting_rate",
        "[default.rate]\nstarting_rate = 10",
        "[default.rate]\nstarting_rate = 20",
    ),
    (
        "default.rate.quota",
        "[default.rate]\nquota = \"40/s\"",
        "[default.rate]\nquota = \"50/s\"",
    ),
    (
        "default.rate.burst",
        "[default.rate]\nstarting_rate = 10\nburst = 2",
        "[default.rate]\nstarting_rate = 10\nburst = 3",
    ),
    (
        "default.rate.bounds",
        "[default.rate]\nstarting_rate = 10\nbounds = [1, 100]",
        "[default.rate]\nstarting_rate = 10\nbounds = [1, 200]",
    ),
    (
        "default.rate.increase_by",
        "[default.rate]\nstarting_rate = 10\nincrease_by = 1",
        "[default.rate]\nstarting_rate = 10\nincrease_by = 2",
    ),
    (
        "default.rate.decrease_by",
        "[default.rate]\nstarting_rate = 10\ndecrease_by = 1",
        "[default.rate]\nstarting_rate = 10\ndecrease_by = 2",
    ),
    // 0.2's names for the two steps, still read.
    (
        "default.rate.increment",
        "[default.rate]\nstarting_rate = 10\nincrement = 1",
        "[default.rate]\nstarting_rate = 10\nincrement = 2",
    ),
    (
        "default.rate.decrement",
        "[default.rate]\nstarting_rate = 10\ndecrement = 1",
        "[default.rate]\nstarting_rate = 10\ndecrement = 2",
    ),
    (
        "default.rate.decrease_factor",
        "[default.rate]\nstarting_rate = 10\ndecrease_factor = 0.5",
        "[default.rate]\nstarting_rate = 10\ndecrease_factor = 0.6",
    ),
    (
        "default.rate.decrease_cooldown",
        "[default.rate]\nstarting_rate = 10\ndecrease_cooldown = \"1s\"",
        "[default.rate]\nstarting_rate = 10\ndecrease_cooldown = \"2s\"",
    ),
    (
        "default.throttle.ratio",
        "[default.throttle]\nratio = 2.0",
        "[default.throttle]\nratio = 3.0",
    ),
    (
        "default.throttle.min_rate",
        "[default.throttle]\nmin_rate = 1.0",
        "[default.throttle]\nmin_rate = 2.0",
    ),
    (
        "default.throttle.window",
        "[default.throttle]\nwindow = \"1m\"",
        "[default.throttle]\nwindow = \"2m\"",
    ),
    (
        "default.throttle.min_requests",
        "[default.throttle]\nmin_requests = 5",
        "[default.throttle]\nmin_requests = 6",
    ),
    (
        "default.throttle.max_rejection",
        "[default.throttle]\nmax_rejection = 0.8",
        "[default.throttle]\nmax_rejection = 0.9",
    ),
    (
        "default.bulkhead.max_concurrent",
        "[default.bulkhead]\nmax_concurrent = 4",
        "[default.bulkhead]\nmax_concurrent = 5",
    ),
    (
        "default.bulkhead.adaptive",
        "[default.bulkhead]\nmax_concurrent = 4\nadaptive = false",
        "[default.bulkhead]\nadaptive = true",
    ),
    (
        "default.bulkhead.bounds",
        "[default.bulkhead]\nadaptive = true\nbounds = [1, 100]",
        "[default.bulkhead]\nadaptive = true\nbounds = [1, 200]",
    ),
    (
        "default.bulkhead.probe_interval",
        "[default.bulkhead]\nadaptive = true\nprobe_interval = \"10s\"",
        "[default.bulkhead]\nadaptive = true\nprobe_interval = \"20s\"",
    ),
    (
        "default.bulkhead.probe_jitter",
        "[default.bulkhead]\nadaptive = true\nprobe_jitter = \"1s\"",
        "[default.bulkhead]\nadaptive = true\nprobe_jitter = \"2s\"",
    ),
    (
        "default.bulkhead.probe_calls",
        "[default.bulkhead]\nadaptive = true\nprobe_calls = 10",
        "[default.bulkhead]\nadaptive = true\nprobe_calls = 20",
    ),
    (
        "default.bulkhead.probe_limit",
        "[default.bulkhead]\nadaptive = true\nprobe_limit = 2",
        "[default.bulkhead]\nadaptive = true\nprobe_limit = 3",
    ),
    (
        "default.bulkhead.queue",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 1",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 2",
    ),
    (
        "default.bulkhead.queue_timeout",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 1\nqueue_timeout = \"1s\"",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 1\nqueue_timeout = \"2s\"",
    ),
    (
        "default.bulkhead.overflow",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 1\noverflow = \"drop-oldest\"",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 1\noverflow = \"reject-new\"",
    ),
    (
        "default.bulkhead.fair_queuing",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 1\nfair_queuing = false",
        "[default.bulkhead]\nmax_concurrent = 4\nqueue = 1\nfair_queuing = true",
    ),
    (
        "default.shadow",
        "[default]\nshadow = false",
        "[default]\nshadow = true",
    ),
    (
        "default.limits",
        "[default.limits.tokens]\nquota = \"600/min\"",
        "[default.limits.tokens]\nquota = \"700/min\"",
    ),
    (
        "overrides",
        "",
        "[overrides.\"api\".bulkhead]\nmax_concurrent = 4",
    ),
    ("tiers", "", "[tiers.\"pro\".bulkhead]\nmax_concurrent = 4"),
    (
        "keys.max_keys",
        "[keys]\nmax_keys = 10",
        "[keys]\nmax_keys = 20",
    ),
    (
        "keys.idle_ttl",
        "[keys]\nidle_ttl = \"1m\"",
        "[keys]\nidle_ttl = \"2m\"",
    ),
    (
        "keys.max_hold",
        "[keys]\nmax_hold = \"1m\"",
        "[keys]\nmax_hold = \"2m\"",
    ),
    (
        "priority_levels",
        "priority_levels = 2",
        "priority_levels = 3",
    ),
    (
        "call_timeout",
        "call_timeout = \"1s\"",
        "call_timeout = \"2s\"",
    ),
    ("max_defer", "max_defer = \"1m\"", "max_defer = \"2m\""),
    ("max_wait", "max_wait = \"1s\"", "max_wait = \"2s\""),
    (
        "max_wait_for.priority",
        "[[max_wait_for]]\npriority = 1\nmax_wait = \"1s\"",
        "[[max_wait_for]]\npriority = 2\nmax_wait = \"1s\"",
    ),
    (
        "max_wait_for.max_wait",
        "[[max_wait_for]]\npriority = 1\nmax_wait = \"1s\"",
        "[[max_wait_for]]\npriority = 1\nmax_wait = \"2s\"",
    ),
];

/// The builder a file makes, as its `Debug` shows every setting.
fn builder_from(file: &str) -> String {
    let config: ManagerConfig = toml::from_str(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    format!("{:?}", ThrottleManager::<String>::builder().config(config))
}

#[test]
fn every_field_of_a_file_has_a_row() {
    let rows: BTreeSet<String> = ROWS.iter().map(|(path, ..)| (*path).to_owned()).collect();
    let leaves = leaves();
    let missing: Vec<_> = leaves.difference(&rows).collect();
    let unknown: Vec<_> = rows.difference(&leaves).collect();
    assert!(missing.is_empty(), "fields without a row: {missing:?}");
    assert!(unknown.is_empty(), "rows for no field: {unknown:?}");
}

#[test]
fn every_field_of_a_file_reaches_the_builder() {
    for (path, one, other) in ROWS {
        assert_ne!(
            builder_from(one),
            builder_from(other),
            "`{path}` set to two values made the same builder"
        );
    }
}
