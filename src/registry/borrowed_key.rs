//! [`BorrowedKey`]: how a call names its key without owning one.

use std::borrow::Borrow;
use std::hash::Hash;

/// How a call names a key of a `ThrottleManager<K>`: by `&K` itself, or by
/// any form `K` borrows as (`&str` for `String` keys, as a `HashMap`'s
/// `get` takes), from which a `K` is made the first time the key is seen.
///
/// Every `Q` that `K` borrows as, and that `K` can be made from as owned,
/// is one: there is nothing to implement. The methods taking a key name it
/// in one bound (`Q: BorrowedKey<K> + ?Sized`) instead of the four of
/// `HashMap`'s style.
///
/// ```
/// use portcullis::manager::BorrowedKey;
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// // A helper generic over how its caller names a key.
/// fn spend<Q: BorrowedKey<String> + ?Sized>(manager: &ThrottleManager<String>, key: &Q) -> bool {
///     manager.try_acquire(key, Priority::HIGH).is_ok()
/// }
///
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::per_second(1)).build()?;
/// assert!(spend(&manager, "api")); // a &str
/// assert!(!spend(&manager, &"api".to_string())); // a &String: the same key
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub trait BorrowedKey<K>: Hash + Eq + sealed::SealedKey<K> {
    /// Whether `key` is the key this names.
    #[doc(hidden)]
    fn names(&self, key: &K) -> bool;

    /// The key this names, owned: made once, when the key is new.
    #[doc(hidden)]
    fn to_key(&self) -> K;
}

impl<K, Q> BorrowedKey<K> for Q
where
    K: Borrow<Q> + From<Q::Owned>,
    Q: Hash + Eq + ToOwned + ?Sized,
{
    #[inline]
    fn names(&self, key: &K) -> bool {
        key.borrow() == self
    }

    #[inline]
    fn to_key(&self) -> K {
        K::from(self.to_owned())
    }
}

mod sealed {
    use std::borrow::Borrow;

    /// Keeps [`BorrowedKey`](super::BorrowedKey) to its blanket
    /// implementation.
    pub trait SealedKey<K> {}

    impl<K, Q> SealedKey<K> for Q
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: ToOwned + ?Sized,
    {
    }
}
