//! What the memory benches share: a million `String` keys shaped like
//! IPv4 addresses, and the process's resident bytes (Linux).

/// How many keys each memory bench makes.
pub(crate) const KEYS: usize = 1_000_000;

/// This process's resident memory, in bytes, from `/proc/self/statm`.
pub(crate) fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// [`KEYS`] distinct keys: `10.0.0.0`, `10.0.0.1`, ...
pub(crate) fn keys() -> Vec<String> {
    (0..KEYS)
        .map(|i| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255))
        .collect()
}
