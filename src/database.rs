//! Databases: which sqlx errors mean the database is overloaded (feature
//! `sqlx`), for a database-wide key whose adaptive rate should fall when
//! the database struggles.
//!
//! The pattern, for many users sharing one pool: each user's key limits
//! that user (a [`ThrottleLayer`](crate::server::ThrottleLayer), or
//! `acquire` on the user's key), and one key for the database limits
//! everyone together. The database's key holds a bulkhead as large as the
//! pool, so a query waits for its permit, with the bulkhead's own queue
//! timeout, *before* it asks the pool for a connection (sqlx's own acquire
//! timeout churns connections under contention), and an adaptive rate
//! that learns from [`classify`]:
//!
//! ```
//! use portcullis::builder::Tier;
//! use portcullis::deadline::TimeLimits;
//! use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = ThrottleManager::<String>::builder()
//!     .key_override(
//!         "db",
//!         Tier::new()
//!             .rate(RateConfig::adaptive(500.0).bounds(20.0, 5_000.0))
//!             .bulkhead(BulkheadConfig::new(4).queue(64).queue_timeout(Duration::from_millis(250))),
//!     )
//!     .classifier(portcullis::edge::database::classify_error)
//!     .time_limits(TimeLimits::new().max_wait(Duration::from_millis(250)))
//!     .build()?;
//! # async fn query() -> Result<i64, sqlx::Error> { Ok(1) }
//! let rows: Result<i64, _> = manager.call("db", Priority::HIGH, query).await;
//! # assert_eq!(rows.unwrap(), 1);
//! # Ok(())
//! # }
//! ```

use std::error::Error;

use crate::outcome::{Outcome, transport_overload};

/// How an error of sqlx tells of the database's capacity:
///
/// | error | outcome |
/// |---|---|
/// | `PoolTimedOut`: no connection within the pool's acquire timeout | [`Overloaded`](Outcome::Overloaded) |
/// | SQLite `SQLITE_BUSY` ("database is locked") and `SQLITE_LOCKED`, with their extended codes | [`Overloaded`](Outcome::Overloaded) |
/// | SQLSTATE `53000`, `53200`, `53300` (insufficient resources, out of memory, too many connections), `57014` (a statement timeout), `57P03` (cannot connect now), `55P03` (lock not available), `40001` and `40P01` (serialization failure, deadlock), `08004` (MySQL: too many connections) | [`Overloaded`](Outcome::Overloaded) |
/// | an I/O error: a refused, reset or timed-out connection | [`Overloaded`](Outcome::Overloaded) |
/// | anything else: a constraint violation, a missing row, a decode error, a closed pool | [`Neutral`](Outcome::Neutral) |
///
/// SQLite gives its (extended) result code as a number, the others a
/// five-character SQLSTATE; that is how the two are told apart.
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::edge::database::classify;
///
/// assert_eq!(classify(&sqlx::Error::PoolTimedOut), Outcome::Overloaded);
/// assert_eq!(classify(&sqlx::Error::RowNotFound), Outcome::Neutral);
/// ```
pub fn classify(error: &sqlx::Error) -> Outcome {
    match error {
        sqlx::Error::PoolTimedOut => Outcome::Overloaded,
        sqlx::Error::Io(io) => transport_overload(io),
        sqlx::Error::Database(database) => match database.code() {
            Some(code) if is_overload_code(&code) => Outcome::Overloaded,
            _ => Outcome::Neutral,
        },
        _ => Outcome::Neutral,
    }
}

/// [`classify`] for any error that is, or was caused by, a `sqlx::Error`
/// (found in its `source()` chain); other errors by
/// [`transport_overload`]. For
/// [`ThrottleManagerBuilder::classifier`](crate::builder::ThrottleManagerBuilder::classifier),
/// so `call` judges a query's error by itself.
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::edge::database::classify_error;
///
/// assert_eq!(classify_error(&sqlx::Error::PoolTimedOut), Outcome::Overloaded);
/// let timeout = std::io::Error::from(std::io::ErrorKind::TimedOut);
/// assert_eq!(classify_error(&timeout), Outcome::Overloaded);
/// ```
pub fn classify_error(error: &(dyn Error + 'static)) -> Outcome {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(sqlx) = error.downcast_ref::<sqlx::Error>() {
            return classify(sqlx);
        }
        next = error.source();
    }
    transport_overload(error)
}

/// Whether a database's error code says it is out of capacity.
fn is_overload_code(code: &str) -> bool {
    /// SQLite's primary result codes (the low byte of an extended one).
    const SQLITE_BUSY: u32 = 5;
    const SQLITE_LOCKED: u32 = 6;
    const SQLSTATES: [&str; 9] = [
        "53000", "53200", "53300", "57014", "57P03", "55P03", "40001", "40P01", "08004",
    ];
    if code.len() == 5 {
        return SQLSTATES.contains(&code);
    }
    code.parse::<u32>()
        .is_ok_and(|code| matches!(code & 0xff, SQLITE_BUSY | SQLITE_LOCKED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_codes_are_read_by_their_primary_code() {
        assert!(is_overload_code("5")); // SQLITE_BUSY
        assert!(is_overload_code("261")); // SQLITE_BUSY_RECOVERY
        assert!(is_overload_code("517")); // SQLITE_BUSY_SNAPSHOT
        assert!(is_overload_code("773")); // SQLITE_BUSY_TIMEOUT
        assert!(is_overload_code("6")); // SQLITE_LOCKED
        assert!(is_overload_code("262")); // SQLITE_LOCKED_SHAREDCACHE
        assert!(!is_overload_code("19")); // SQLITE_CONSTRAINT
        assert!(!is_overload_code("2067")); // SQLITE_CONSTRAINT_UNIQUE
        assert!(!is_overload_code("1"));
    }

    #[test]
    fn sqlstates_are_matched_whole() {
        assert!(is_overload_code("53300"));
        assert!(is_overload_code("40P01"));
        assert!(!is_overload_code("23505")); // unique violation
        assert!(!is_overload_code("42P01")); // undefined table
        // Five digits are a SQLSTATE, not a SQLite code whose low byte is 5.
        assert!(!is_overload_code("00005"));
    }

    #[test]
    fn the_error_chain_is_searched_for_sqlx() {
        #[derive(Debug)]
        struct Wrapped(sqlx::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("query failed")
            }
        }
        impl Error for Wrapped {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        assert_eq!(
            classify_error(&Wrapped(sqlx::Error::PoolTimedOut)),
            Outcome::Overloaded
        );
        assert_eq!(
            classify_error(&Wrapped(sqlx::Error::RowNotFound)),
            Outcome::Neutral
        );
    }
}
