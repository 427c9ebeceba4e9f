//! Which client a request comes from: [`KeyExtractor`].

use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::HeaderName;
use http::request::Parts;
use ipnet::Ipv6Net;

pub use super::proxies::TrustedProxies;
use crate::error::{ConfigError, ConfigProblem};

type KeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// The key type of a [`ThrottleLayer`](super::ThrottleLayer)'s manager:
/// one the layer makes from the text its [`KeyExtractor`] finds, by
/// `From<String>`. `String` is one; so is an enum of the program's keys
/// whose `From<String>` makes only its clients' variant. With such a key
/// type the clients a network names and the program's own keys (a
/// database, a backend) live in one manager, and no header can name the
/// program's: a request sent as user `Database` is `Key::User("Database")`.
/// A handler then charges both at once with
/// [`call_all`](crate::ThrottleManager::call_all).
///
/// ```
/// use portcullis::server::{KeyExtractor, ThrottleLayer};
/// use portcullis::{BulkheadConfig, ThrottleManager};
///
/// #[derive(Debug, Clone, PartialEq, Eq, Hash)]
/// enum Key {
///     User(String),
///     Database,
/// }
///
/// impl From<String> for Key {
///     fn from(user: String) -> Self {
///         Key::User(user)
///     }
/// }
///
/// let manager = ThrottleManager::<Key>::builder()
///     .bulkhead(BulkheadConfig::new(4).queue(64).fair_queuing())
///     .build()?;
/// let layer = ThrottleLayer::new(manager.clone(), KeyExtractor::header("x-user-id"));
/// # drop(layer);
/// // In a handler: the user's key and the database's, charged at once.
/// # let _ = [Key::User("7".into()), Key::Database];
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub trait LayerKey: From<String> + Clone + Hash + Eq + Send + Sync + 'static {}

impl<K> LayerKey for K where K: From<String> + Clone + Hash + Eq + Send + Sync + 'static {}

/// How a [`ThrottleLayer`](super::ThrottleLayer) finds a request's key:
/// the client it limits.
///
/// A request without one is answered at once (400 by default, naming what
/// was missing; see
/// [`on_missing_key`](super::ThrottleLayerBuilder::on_missing_key)), never put in
/// a bucket shared by every keyless request.
///
/// A key longer than [`max_len`](Self::max_len) (256 bytes by default) is
/// no key: the client writes it, and the manager keeps up to `max_keys` of
/// them, so their length bounds the key space's memory.
///
/// Addresses make keys as text: `203.0.113.7` for IPv4 (also when it
/// arrives as an IPv4-mapped IPv6 address), and the /64 network for IPv6
/// (`2001:db8:1:2::/64`), since one IPv6 host usually holds a whole /64
/// and would otherwise have 2^64 keys
/// ([`ipv6_prefix`](Self::ipv6_prefix) changes the length).
///
/// # Example
///
/// ```
/// use portcullis::server::{KeyExtractor, TrustedProxies};
///
/// let by_api_key = KeyExtractor::header("x-api-key");
/// let by_peer = KeyExtractor::peer_ip();
/// let behind_proxy = KeyExtractor::forwarded_ip(TrustedProxies::new(["10.0.0.0/8"])?);
/// let by_user = KeyExtractor::from_fn(|request| {
///     request.extensions.get::<UserId>().map(|user| user.0.to_string())
/// });
/// # #[derive(Clone)] struct UserId(u64);
/// # drop((by_api_key, by_peer, behind_proxy, by_user));
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct KeyExtractor {
    source: Source,
    /// How many leading bits of an IPv6 address make its key.
    ipv6_prefix: u8,
    /// The longest key taken, in bytes.
    max_len: usize,
    /// What was wrong in how it was made, for the layer's `build` to
    /// report (`header` and `ipv6_prefix` cannot fail themselves).
    problems: Vec<ConfigProblem>,
}

/// The longest key taken by default, in bytes: API keys and tokens fit,
/// and a million keys of it stay near a quarter of a gigabyte.
const DEFAULT_MAX_LEN: usize = 256;

#[derive(Clone)]
enum Source {
    /// A header's value; `Err` holds a name that is not a header name.
    Header(Result<HeaderName, String>),
    PeerIp,
    ForwardedIp(Arc<TrustedProxies>),
    Function(Arc<KeyFn>),
}

/// Why a request has no key; what the default answer's body says.
///
/// ```
/// use portcullis::server::MissingKey;
///
/// let missing = MissingKey::new("header `x-api-key`");
/// assert_eq!(missing.to_string(), "missing client key: header `x-api-key`");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingKey {
    what: String,
}

impl MissingKey {
    /// A key missing because of `what`.
    ///
    /// ```
    /// # use portcullis::server::MissingKey;
    /// assert_eq!(MissingKey::new("no session").what(), "no session");
    /// ```
    pub fn new(what: impl Into<String>) -> Self {
        Self { what: what.into() }
    }

    /// What was missing or unreadable.
    ///
    /// ```
    /// # use portcullis::server::MissingKey;
    /// assert_eq!(MissingKey::new("header `x-api-key`").what(), "header `x-api-key`");
    /// ```
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl fmt::Display for MissingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "missing client key: {}", self.what)
    }
}

impl std::error::Error for MissingKey {}

impl KeyExtractor {
    /// The value of header `name` (case-insensitive), for API keys and
    /// tenant ids. A request without the header, or with an empty or
    /// non-ASCII value, has no key.
    ///
    /// A `name` that is not a header name is refused by
    /// [`ThrottleLayer::builder`](super::ThrottleLayer::builder)'s `build`
    /// and by [`validate`](Self::validate), naming `extractor.header`;
    /// [`try_header`](Self::try_header) refuses it at once.
    ///
    /// ```
    /// use portcullis::server::KeyExtractor;
    ///
    /// let extractor = KeyExtractor::header("x-api-key");
    /// assert!(extractor.validate().is_ok());
    /// let error = KeyExtractor::header("x api key").validate().unwrap_err();
    /// assert_eq!(error.to_string(), "invalid configuration: extractor.header: `x api key` is not a header name");
    /// ```
    pub fn header(name: impl AsRef<str>) -> Self {
        let name = name.as_ref();
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(parsed) => Self::from_source(Source::Header(Ok(parsed))),
            Err(_) => {
                let mut extractor = Self::from_source(Source::Header(Err(name.to_owned())));
                extractor
                    .problems
                    .push(not_a_header_name("extractor.header", name));
                extractor
            }
        }
    }

    /// [`header`](Self::header), for a name that may not be a header name
    /// (one read from configuration).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `header` when `name` is not a header name.
    ///
    /// ```
    /// use portcullis::server::KeyExtractor;
    ///
    /// assert!(KeyExtractor::try_header("x-tenant").is_ok());
    /// let error = KeyExtractor::try_header("x tenant").unwrap_err();
    /// assert_eq!(error.to_string(), "invalid configuration: header: `x tenant` is not a header name");
    /// ```
    pub fn try_header(name: impl AsRef<str>) -> Result<Self, ConfigError> {
        let name = name.as_ref();
        let parsed = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ConfigError::from(not_a_header_name("header", name)))?;
        Ok(Self::from_source(Source::Header(Ok(parsed))))
    }

    /// The address of the peer that opened the connection: a `SocketAddr`
    /// in the request's extensions (what a hyper server puts there, or a
    /// user's own layer), or, with feature `axum`, axum's
    /// `ConnectInfo<SocketAddr>` (serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`), or, with
    /// feature `tonic`, the `TcpConnectInfo` a tonic server adds. Behind
    /// a proxy every request has the proxy's address: use
    /// [`forwarded_ip`](Self::forwarded_ip) there.
    ///
    /// ```
    /// use portcullis::server::KeyExtractor;
    ///
    /// let extractor = KeyExtractor::peer_ip();
    /// # drop(extractor);
    /// ```
    pub fn peer_ip() -> Self {
        Self::from_source(Source::PeerIp)
    }

    /// The client's address as the proxies in `proxies` report it.
    ///
    /// A peer that is not one of `proxies` is the client, whatever headers
    /// it sends. A trusted peer's forwarding header (`X-Forwarded-For`, or
    /// `Forwarded` if [`TrustedProxies::forwarded`]; for the headers that
    /// hold one address, see [`TrustedProxies::x_real_ip`]) is read from the
    /// right, each entry written by the hop before: the first address that
    /// is not a trusted proxy is the client. The leftmost entry, which the
    /// client wrote itself, counts only if every hop after it is trusted.
    /// An entry that is not an address where the client should be
    /// (`unknown`, an obfuscated name) leaves the request without a key.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, TrustedProxies};
    ///
    /// // One load balancer in front, at 10.0.0.5; it appends to X-Forwarded-For.
    /// let extractor = KeyExtractor::forwarded_ip(TrustedProxies::new(["10.0.0.5"])?);
    /// # drop(extractor);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn forwarded_ip(proxies: TrustedProxies) -> Self {
        Self::from_source(Source::ForwardedIp(Arc::new(proxies)))
    }

    /// The key `key_of` finds in the request's head (method, URI, headers,
    /// extensions an earlier layer set): a user id from an authentication
    /// layer, or route and client together for per-route quotas. `None`
    /// means the request has no key.
    ///
    /// ```
    /// use portcullis::server::KeyExtractor;
    ///
    /// // Per route and API key: /search and /upload have separate quotas.
    /// let extractor = KeyExtractor::from_fn(|request| {
    ///     let api_key = request.headers.get("x-api-key")?.to_str().ok()?;
    ///     Some(format!("{}:{api_key}", request.uri.path()))
    /// });
    /// # drop(extractor);
    /// ```
    pub fn from_fn<F>(key_of: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self::from_source(Source::Function(Arc::new(key_of)))
    }

    /// Keys IPv6 clients by their first `bits` bits (default 64; 128: one
    /// key per address).
    ///
    /// `bits` above 128 or zero (every IPv6 client would share one key),
    /// or an extractor that does not read addresses, is refused by the
    /// layer's `build` and by [`validate`](Self::validate), naming
    /// `extractor.ipv6_prefix`.
    ///
    /// ```
    /// use portcullis::server::KeyExtractor;
    ///
    /// let per_site = KeyExtractor::peer_ip().ipv6_prefix(48);
    /// assert!(per_site.validate().is_ok());
    /// let error = KeyExtractor::header("x-api-key").ipv6_prefix(48).validate().unwrap_err();
    /// assert_eq!(
    ///     error.to_string(),
    ///     "invalid configuration: extractor.ipv6_prefix: applies to keys made from addresses, not to header `x-api-key`"
    /// );
    /// ```
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        let problem = if !matches!(self.source, Source::PeerIp | Source::ForwardedIp(_)) {
            Some(format!(
                "applies to keys made from addresses, not to {}",
                self.source.describe()
            ))
        } else if bits == 0 || bits > 128 {
            Some(format!("must be from 1 to 128 bits, got {bits}"))
        } else {
            None
        };
        match problem {
            Some(problem) => self
                .problems
                .push(ConfigProblem::new("extractor.ipv6_prefix", problem)),
            None => self.ipv6_prefix = bits,
        }
        self
    }

    /// Every problem in how this extractor was made, each named
    /// `extractor.<setting>`, as the layer's `build` reports them.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing them.
    ///
    /// ```
    /// use portcullis::server::KeyExtractor;
    ///
    /// let error = KeyExtractor::peer_ip().ipv6_prefix(0).validate().unwrap_err();
    /// assert_eq!(error.to_string(), "invalid configuration: extractor.ipv6_prefix: must be from 1 to 128 bits, got 0");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        match ConfigError::from_problems(self.problems.iter().cloned()) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Takes keys of at most `bytes` bytes (default 256); a longer one
    /// leaves the request without a key. With the manager's
    /// [`max_keys`](crate::builder::KeySpaceConfig::max_keys), this bounds
    /// what keys from untrusted input can cost: about `max_keys` times
    /// `bytes` plus the per-key state (200 to 700 bytes; `benches/README.md`
    /// has the figures).
    ///
    /// ```
    /// use portcullis::server::KeyExtractor;
    ///
    /// // API keys here are 40 characters.
    /// let extractor = KeyExtractor::header("x-api-key").max_len(40);
    /// # drop(extractor);
    /// ```
    #[must_use]
    pub fn max_len(mut self, bytes: usize) -> Self {
        self.max_len = bytes;
        self
    }

    fn from_source(source: Source) -> Self {
        Self {
            source,
            ipv6_prefix: 64,
            max_len: DEFAULT_MAX_LEN,
            problems: Vec::new(),
        }
    }

    /// What was wrong in how it was made.
    pub(super) fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }

    /// The key of the request whose head is `request`.
    pub(super) fn key_of(&self, request: &Parts) -> Result<String, MissingKey> {
        let key = self.find_key(request)?;
        if key.len() > self.max_len {
            return Err(MissingKey::new(format!(
                "{} gave a key of {} bytes, over the limit of {} (KeyExtractor::max_len)",
                self.source.describe(),
                key.len(),
                self.max_len
            )));
        }
        Ok(key)
    }

    fn find_key(&self, request: &Parts) -> Result<String, MissingKey> {
        match &self.source {
            Source::Header(Ok(name)) => request
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .filter(|value| !value.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| MissingKey::new(format!("header `{name}`"))),
            Source::Header(Err(name)) => Err(MissingKey::new(format!(
                "`{name}` is not a header name (KeyExtractor::header)"
            ))),
            Source::PeerIp => Ok(self.ip_key(peer_ip(request)?)),
            Source::ForwardedIp(proxies) => Ok(self.ip_key(proxies.client_of(request)?)),
            Source::Function(key_of) => {
                key_of(request).ok_or_else(|| MissingKey::new("no key for this request"))
            }
        }
    }

    fn ip_key(&self, ip: IpAddr) -> String {
        match ip.to_canonical() {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) if self.ipv6_prefix == 128 => v6.to_string(),
            // `ipv6_prefix` is from 1 to 128, as its setter checks.
            IpAddr::V6(v6) => Ipv6Net::new_assert(v6, self.ipv6_prefix)
                .trunc()
                .to_string(),
        }
    }
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Header(Ok(name)) => format!("header `{name}`"),
            Source::Header(Err(name)) => format!("header `{name}`"),
            Source::PeerIp => "the peer address".to_owned(),
            Source::ForwardedIp(_) => "the forwarded address".to_owned(),
            Source::Function(_) => "a key function".to_owned(),
        }
    }
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("KeyExtractor");
        out.field("source", &self.source.describe());
        if let Source::ForwardedIp(proxies) = &self.source {
            out.field("proxies", proxies);
        }
        out.field("ipv6_prefix", &self.ipv6_prefix)
            .field("max_len", &self.max_len)
            .finish()
    }
}

/// The peer's address, from a plain `SocketAddr`, axum's `ConnectInfo` or
/// tonic's `TcpConnectInfo`.
pub(super) fn peer_ip(request: &Parts) -> Result<IpAddr, MissingKey> {
    let extensions = &request.extensions;
    let plain = extensions.get::<SocketAddr>().map(SocketAddr::ip);
    #[cfg(feature = "axum")]
    let plain = plain.or_else(|| {
        extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip())
    });
    #[cfg(feature = "tonic")]
    let plain = plain.or_else(|| {
        extensions
            .get::<tonic::transport::server::TcpConnectInfo>()
            .and_then(|info| info.remote_addr())
            .map(|addr| addr.ip())
    });
    plain.ok_or_else(|| {
        MissingKey::new(
            "the peer address (serve with into_make_service_with_connect_info::<SocketAddr>())",
        )
    })
}

/// The problem of a `name` that is not a header name, under `field`.
pub(super) fn not_a_header_name(field: &str, name: &str) -> ConfigProblem {
    ConfigProblem::new(field, format!("`{name}` is not a header name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder();
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let (mut parts, ()) = builder.body(()).unwrap().into_parts();
        let peer: SocketAddr = peer.parse().unwrap();
        parts.extensions.insert(peer);
        parts
    }

    /// axum's `ConnectInfo` is read as the peer's address too.
    #[cfg(feature = "axum")]
    #[test]
    fn the_peer_comes_from_axums_connect_info() {
        let (mut parts, ()) = http::Request::builder().body(()).unwrap().into_parts();
        let peer: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        parts.extensions.insert(axum::extract::ConnectInfo(peer));
        assert_eq!(KeyExtractor::peer_ip().key_of(&parts).unwrap(), "192.0.2.7");
    }

    fn key(
        extractor: &KeyExtractor,
        peer: &str,
        headers: &[(&str, &str)],
    ) -> Result<String, String> {
        extractor
            .key_of(&request(peer, headers))
            .map_err(|missing| missing.to_string())
    }

    #[test]
    fn a_header_key_is_its_value_and_an_empty_one_is_missing() {
        let extractor = KeyExtractor::header("X-Api-Key");
        assert_eq!(
            key(&extractor, "1.2.3.4:1", &[("x-api-key", "k1")]),
            Ok("k1".into())
        );
        assert_eq!(
            key(&extractor, "1.2.3.4:1", &[("x-api-key", "")]),
            Err("missing client key: header `x-api-key`".into())
        );
        let invalid = KeyExtractor::header("x api key");
        assert_eq!(
            key(&invalid, "1.2.3.4:1", &[]),
            Err(
                "missing client key: `x api key` is not a header name (KeyExtractor::header)"
                    .into()
            )
        );
    }

    #[test]
    fn a_key_over_the_length_limit_is_no_key() {
        let long = "k".repeat(257);
        let extractor = KeyExtractor::header("x-api-key");
        assert_eq!(
            key(&extractor, "1.2.3.4:1", &[("x-api-key", &long)]),
            Err("missing client key: header `x-api-key` gave a key of 257 bytes, over the limit of 256 (KeyExtractor::max_len)".into())
        );
        let at_limit = "k".repeat(256);
        assert_eq!(
            key(&extractor, "1.2.3.4:1", &[("x-api-key", &at_limit)]),
            Ok(at_limit)
        );
        let short = KeyExtractor::header("x-api-key").max_len(4);
        assert!(key(&short, "1.2.3.4:1", &[("x-api-key", "abcde")]).is_err());
    }

    #[test]
    fn ipv6_peers_are_grouped_by_their_64_bit_network() {
        let extractor = KeyExtractor::peer_ip();
        assert_eq!(
            key(&extractor, "203.0.113.7:5", &[]),
            Ok("203.0.113.7".into())
        );
        assert_eq!(
            key(&extractor, "[2001:db8:1:2:aaaa::1]:5", &[]),
            Ok("2001:db8:1:2::/64".into())
        );
        assert_eq!(
            key(&extractor, "[2001:db8:1:2:bbbb::9]:5", &[]),
            Ok("2001:db8:1:2::/64".into())
        );
        // An IPv4 client on a dual-stack socket is its IPv4 address.
        assert_eq!(
            key(&extractor, "[::ffff:198.51.100.9]:5", &[]),
            Ok("198.51.100.9".into())
        );
        let per_address = KeyExtractor::peer_ip().ipv6_prefix(128);
        assert!(per_address.validate().is_ok());
        assert_eq!(
            key(&per_address, "[2001:db8::1]:5", &[]),
            Ok("2001:db8::1".into())
        );
        assert!(KeyExtractor::peer_ip().ipv6_prefix(0).validate().is_err());
        assert!(KeyExtractor::peer_ip().ipv6_prefix(129).validate().is_err());
    }

    #[test]
    fn the_client_is_the_rightmost_address_that_is_not_a_trusted_proxy() {
        let proxies = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let extractor = KeyExtractor::forwarded_ip(proxies);
        // The client forged the leftmost entry; the proxy appended the real one.
        let forged = [("x-forwarded-for", "6.6.6.6, 198.51.100.2")];
        assert_eq!(
            key(&extractor, "10.1.1.1:80", &forged),
            Ok("198.51.100.2".into())
        );
        // Two trusted hops, and the header split over two lines.
        let chained = [
            ("x-forwarded-for", "6.6.6.6, 198.51.100.2"),
            ("x-forwarded-for", "10.2.2.2"),
        ];
        assert_eq!(
            key(&extractor, "10.1.1.1:80", &chained),
            Ok("198.51.100.2".into())
        );
        // An untrusted peer is the client, whatever it says.
        assert_eq!(
            key(&extractor, "198.51.100.3:80", &forged),
            Ok("198.51.100.3".into())
        );
        // A trusted peer with no header: the peer.
        assert_eq!(key(&extractor, "10.1.1.1:80", &[]), Ok("10.1.1.1".into()));
        // Garbage where the client should be: no key, not the proxy's.
        assert_eq!(
            key(
                &extractor,
                "10.1.1.1:80",
                &[("x-forwarded-for", "1.2.3.4, bogus")]
            ),
            Err(
                "missing client key: \"bogus\" in header `x-forwarded-for` is not an address"
                    .into()
            )
        );
        // Ports and brackets, as some proxies write them.
        let with_port = [("x-forwarded-for", "[2001:db8::7]:443")];
        assert_eq!(
            key(&extractor, "10.1.1.1:80", &with_port),
            Ok("2001:db8::/64".into())
        );
    }

    #[test]
    fn forwarded_is_read_only_when_named_and_then_by_its_for_parameter() {
        let proxies = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let standard = KeyExtractor::forwarded_ip(proxies.clone().forwarded());
        let headers = [
            (
                "forwarded",
                r#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https"#,
            ),
            ("x-forwarded-for", "7.7.7.7"),
        ];
        assert_eq!(
            key(&standard, "10.0.0.1:80", &headers),
            Ok("2001:db8:cafe::/64".into())
        );
        let legacy = KeyExtractor::forwarded_ip(proxies);
        assert_eq!(key(&legacy, "10.0.0.1:80", &headers), Ok("7.7.7.7".into()));
        assert!(key(&standard, "10.0.0.1:80", &[("forwarded", "for=unknown")]).is_err());
    }

    /// RFC 7239's parameter names are case-insensitive: `For=` and `FOR=`
    /// are the client's address as `for=` is.
    #[test]
    fn forwarded_parameter_names_are_case_insensitive() {
        let proxies = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let standard = KeyExtractor::forwarded_ip(proxies.forwarded());
        for element in [
            "For=192.0.2.60;proto=http",
            "FOR=192.0.2.60",
            "proto=http;fOr=192.0.2.60",
        ] {
            assert_eq!(
                key(&standard, "10.0.0.1:80", &[("forwarded", element)]),
                Ok("192.0.2.60".into()),
                "{element}"
            );
        }
    }
}
