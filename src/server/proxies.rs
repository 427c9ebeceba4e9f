//! The proxies whose word on a client's address is believed
//! ([`TrustedProxies`]), and reading the forwarding headers they write.

use std::net::{IpAddr, SocketAddr};

use http::header::{FORWARDED, HeaderName};
use http::request::Parts;

use super::key::{MissingKey, peer_ip};
use crate::error::{ConfigError, ConfigProblem};

/// The proxies whose forwarding headers
/// [`KeyExtractor::forwarded_ip`](super::KeyExtractor::forwarded_ip) believes: addresses and CIDR ranges.
///
/// ```
/// use portcullis::server::TrustedProxies;
///
/// let proxies = TrustedProxies::new(["10.0.0.0/8", "fd00::/8", "192.0.2.1"])?;
/// # drop(proxies);
/// let err = TrustedProxies::new(["10.0.0.0/33"]).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid configuration: trusted_proxies[0]: `10.0.0.0/33` is not an address or a CIDR range (prefix longer than 32 bits)"
/// );
/// # Ok::<(), portcullis::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<IpRange>,
    header: ProxyHeader,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProxyHeader {
    XForwardedFor,
    Forwarded,
}

/// An address and how many of its leading bits must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IpRange {
    network: IpAddr,
    bits: u8,
}

impl TrustedProxies {
    /// The proxies at `ranges` (`"10.0.0.5"`, `"10.0.0.0/8"`,
    /// `"fd00::/8"`), which append the peer they heard from to
    /// `X-Forwarded-For`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming each entry that is not an address or a
    /// range (`trusted_proxies[2]`).
    ///
    /// ```
    /// use portcullis::server::TrustedProxies;
    ///
    /// let loopback = TrustedProxies::new(["127.0.0.1", "::1"])?;
    /// # drop(loopback);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn new<I, S>(ranges: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut parsed = Vec::new();
        let mut problems = Vec::new();
        for (i, range) in ranges.into_iter().enumerate() {
            match IpRange::parse(range.as_ref()) {
                Ok(range) => parsed.push(range),
                Err(why) => problems.push(ConfigProblem::new(
                    format!("trusted_proxies[{i}]"),
                    format!(
                        "`{}` is not an address or a CIDR range ({why})",
                        range.as_ref()
                    ),
                )),
            }
        }
        if let Some(error) = ConfigError::from_problems(problems) {
            return Err(error);
        }
        Ok(Self {
            ranges: parsed,
            header: ProxyHeader::XForwardedFor,
        })
    }

    /// Reads the standard `Forwarded` header (RFC 7239, its `for=`
    /// parameters) instead of `X-Forwarded-For`. Name the header your
    /// proxies write: the other one is the client's to forge.
    ///
    /// ```
    /// use portcullis::server::TrustedProxies;
    ///
    /// let proxies = TrustedProxies::new(["10.0.0.0/8"])?.forwarded();
    /// # drop(proxies);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[must_use]
    pub fn forwarded(mut self) -> Self {
        self.header = ProxyHeader::Forwarded;
        self
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.ranges.iter().any(|range| range.contains(ip))
    }

    /// The rightmost address in the forwarding chain that is not a trusted
    /// proxy (the peer itself if it is not one).
    pub(super) fn client_of(&self, request: &Parts) -> Result<IpAddr, MissingKey> {
        let mut client = peer_ip(request)?;
        if !self.trusts(client) {
            return Ok(client);
        }
        let header = match self.header {
            ProxyHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ProxyHeader::Forwarded => FORWARDED,
        };
        // Every field line, in order, as one list; then from the right.
        let mut entries: Vec<&str> = Vec::new();
        for line in request.headers.get_all(&header) {
            let Ok(line) = line.to_str() else {
                return Err(MissingKey::new(format!("header `{header}` is not ASCII")));
            };
            entries.extend(line.split(','));
        }
        for entry in entries.iter().rev() {
            let address = match self.header {
                ProxyHeader::XForwardedFor => parse_address(entry),
                ProxyHeader::Forwarded => forwarded_for(entry).and_then(parse_address),
            };
            client = address.ok_or_else(|| {
                MissingKey::new(format!(
                    "`{}` in header `{header}` is not an address",
                    entry.trim()
                ))
            })?;
            if !self.trusts(client) {
                break;
            }
        }
        Ok(client)
    }
}

impl IpRange {
    fn parse(text: &str) -> Result<Self, &'static str> {
        let (address, bits) = match text.split_once('/') {
            Some((address, bits)) => (address, Some(bits)),
            None => (text, None),
        };
        let network: IpAddr = address.trim().parse().map_err(|_| "no address")?;
        let network = network.to_canonical();
        let width = if network.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => width,
            Some(bits) => bits.trim().parse::<u8>().map_err(|_| "no prefix length")?,
        };
        if bits > width {
            return Err(if width == 32 {
                "prefix longer than 32 bits"
            } else {
                "prefix longer than 128 bits"
            });
        }
        Ok(Self { network, bits })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => {
                let mask = mask(self.bits + 96) as u32;
                network.to_bits() & mask == ip.to_bits() & mask
            }
            (IpAddr::V6(network), IpAddr::V6(ip)) => {
                let mask = mask(self.bits);
                network.to_bits() & mask == ip.to_bits() & mask
            }
            _ => false,
        }
    }
}

/// The leading `bits` of 128 set.
pub(super) fn mask(bits: u8) -> u128 {
    match bits {
        0 => 0,
        bits => u128::MAX << (128 - u32::from(bits.min(128))),
    }
}

/// An address as proxies write it: bare, with a port, IPv6 in brackets.
fn parse_address(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|socket| socket.ip()))
        .or_else(|| {
            let inner = text.strip_prefix('[')?.strip_suffix(']')?;
            inner.parse::<IpAddr>().ok()
        })
}

/// The `for=` parameter of one `Forwarded` element (RFC 7239).
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim().eq_ignore_ascii_case("for").then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_match_by_prefix() {
        let proxies = TrustedProxies::new(["192.0.2.0/24", "2001:db8::/32", "127.0.0.1"]).unwrap();
        let trusts = |ip: &str| proxies.trusts(ip.parse().unwrap());
        assert!(trusts("192.0.2.200"));
        assert!(!trusts("192.0.3.1"));
        assert!(trusts("2001:db8:ffff::1"));
        assert!(!trusts("2001:db9::1"));
        assert!(trusts("127.0.0.1"));
        assert!(trusts("::ffff:127.0.0.1"));
        assert!(!trusts("127.0.0.2"));
        let err = TrustedProxies::new(["10.0.0.0/8", "nonsense", "::/200"]).unwrap_err();
        let fields: Vec<&str> = err.problems().iter().map(|p| p.field()).collect();
        assert_eq!(fields, ["trusted_proxies[1]", "trusted_proxies[2]"]);
        assert!(
            TrustedProxies::new(["0.0.0.0/0"])
                .unwrap()
                .trusts("8.8.8.8".parse().unwrap())
        );
    }
}
