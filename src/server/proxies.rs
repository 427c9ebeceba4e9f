//! The proxies whose word on a client's address is believed
//! ([`TrustedProxies`]), and reading the forwarding headers they write.

use std::borrow::Cow;
use std::net::IpAddr;

use http::header::{FORWARDED, HeaderName};
use http::request::Parts;
use ipnet::IpNet;

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
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<IpNet>,
    header: ProxyHeader,
}

/// Where the trusted proxies write the client's address.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ProxyHeader {
    /// `X-Forwarded-For`: a list, each proxy appending its peer.
    XForwardedFor,
    /// RFC 7239 `Forwarded`: a list of elements, each with its `for=`.
    Forwarded,
    /// One address, set (not appended) by the edge: `X-Real-IP`,
    /// `CF-Connecting-IP`, `True-Client-IP`.
    ClientIp(HeaderName),
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
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn new<I, S>(ranges: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut parsed = Vec::new();
        let mut problems = Vec::new();
        for (i, range) in ranges.into_iter().enumerate() {
            match parse_range(range.as_ref()) {
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
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn forwarded(mut self) -> Self {
        self.header = ProxyHeader::Forwarded;
        self
    }

    /// Reads `X-Real-IP`, the one address nginx's `proxy_set_header
    /// X-Real-IP $remote_addr` sets, instead of `X-Forwarded-For`.
    ///
    /// As with every header here, it is believed only from a trusted peer;
    /// a trusted peer that sends none is the client itself, and one that
    /// sends two lines, or a list, sends no key (the client may have added
    /// one of them).
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, TrustedProxies};
    ///
    /// let behind_nginx = KeyExtractor::forwarded_ip(TrustedProxies::new(["10.0.0.2"])?.x_real_ip());
    /// # drop(behind_nginx);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn x_real_ip(self) -> Self {
        self.client_ip(HeaderName::from_static("x-real-ip"))
    }

    /// Reads `CF-Connecting-IP`, the client's address as Cloudflare's edge
    /// saw it. List Cloudflare's published ranges (and your own proxies
    /// behind it) as the trusted proxies: from anyone else the header is
    /// the client's to forge. One address, as [`x_real_ip`](Self::x_real_ip).
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, TrustedProxies};
    ///
    /// let cloudflare = TrustedProxies::new(["173.245.48.0/20", "2400:cb00::/32"])?;
    /// let behind_cloudflare = KeyExtractor::forwarded_ip(cloudflare.cf_connecting_ip());
    /// # drop(behind_cloudflare);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn cf_connecting_ip(self) -> Self {
        self.client_ip(HeaderName::from_static("cf-connecting-ip"))
    }

    /// Reads `True-Client-IP`, the client's address as Akamai's (or
    /// Cloudflare Enterprise's) edge saw it. One address, as
    /// [`x_real_ip`](Self::x_real_ip).
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, TrustedProxies};
    ///
    /// let edge = TrustedProxies::new(["203.0.113.0/24"])?.true_client_ip();
    /// let behind_akamai = KeyExtractor::forwarded_ip(edge);
    /// # drop(behind_akamai);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn true_client_ip(self) -> Self {
        self.client_ip(HeaderName::from_static("true-client-ip"))
    }

    fn client_ip(mut self, header: HeaderName) -> Self {
        self.header = ProxyHeader::ClientIp(header);
        self
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.ranges.iter().any(|range| range.contains(&ip))
    }

    /// The rightmost address in the forwarding chain that is not a trusted
    /// proxy (the peer itself if it is not one).
    ///
    /// The chain is read from the right, the end the proxies write: text
    /// the client put to the left (an unclosed quote, a stray `,`) cannot
    /// change how a trusted proxy's entry reads.
    pub(super) fn client_of(&self, request: &Parts) -> Result<IpAddr, MissingKey> {
        let peer = peer_ip(request)?;
        if !self.trusts(peer) {
            return Ok(peer);
        }
        let header = match &self.header {
            ProxyHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ProxyHeader::Forwarded => FORWARDED,
            ProxyHeader::ClientIp(header) => return one_address(request, header, peer),
        };
        // Every field line, in order, is one list; read from its end.
        let lines: Vec<&str> = request
            .headers
            .get_all(&header)
            .iter()
            .map(|line| line.to_str().map_err(|_| not_ascii(&header)))
            .collect::<Result<_, _>>()?;
        let mut client = peer;
        for line in lines.into_iter().rev() {
            let entries: Box<dyn Iterator<Item = &str>> = match self.header {
                ProxyHeader::Forwarded => Box::new(split_from_right(line, b',')),
                _ => Box::new(line.rsplit(',')),
            };
            for entry in entries {
                let address = match self.header {
                    ProxyHeader::Forwarded => forwarded_for(entry).and_then(|v| parse_address(&v)),
                    _ => parse_address(entry.trim().trim_matches('"')),
                };
                client = address.ok_or_else(|| not_an_address(entry, &header))?;
                if !self.trusts(client) {
                    return Ok(client);
                }
            }
        }
        Ok(client)
    }
}

/// The one address in `header`, which the edge sets; `peer` if there is
/// none. Two lines or a list are no key: one of them may be the client's.
fn one_address(request: &Parts, header: &HeaderName, peer: IpAddr) -> Result<IpAddr, MissingKey> {
    let mut lines = request.headers.get_all(header).iter();
    let Some(line) = lines.next() else {
        return Ok(peer);
    };
    if lines.next().is_some() {
        return Err(MissingKey::new(format!("header `{header}` is given twice")));
    }
    let line = line.to_str().map_err(|_| not_ascii(header))?;
    parse_address(line).ok_or_else(|| not_an_address(line, header))
}

fn not_ascii(header: &HeaderName) -> MissingKey {
    MissingKey::new(format!("header `{header}` is not ASCII"))
}

fn not_an_address(entry: &str, header: &HeaderName) -> MissingKey {
    MissingKey::new(format!(
        "{} in header `{header}` is not an address",
        super::answer::quoted(entry.trim())
    ))
}

/// A trusted proxy's entry: an address (`10.0.0.5`, `fd00::1`, taken as
/// its own /32 or /128) or a CIDR range (`10.0.0.0/8`). An IPv4-mapped
/// IPv6 address is its IPv4 address, as peers are compared.
fn parse_range(text: &str) -> Result<IpNet, &'static str> {
    let (address, bits) = match text.split_once('/') {
        Some((address, bits)) => (address, Some(bits)),
        None => (text, None),
    };
    let network: IpAddr = address.trim().parse().map_err(|_| "no address")?;
    let network = network.to_canonical();
    let bits = match bits {
        None => return Ok(IpNet::from(network)),
        Some(bits) => bits.trim().parse::<u8>().map_err(|_| "no prefix length")?,
    };
    IpNet::new(network, bits).map_err(|_| {
        if network.is_ipv4() {
            "prefix longer than 32 bits"
        } else {
            "prefix longer than 128 bits"
        }
    })
}

/// An address as proxies write it: bare, with a port, IPv6 in brackets,
/// and an IPv6 zone (`fe80::1%eth0`) dropped, since a zone names the
/// proxy's own interface, not the client.
fn parse_address(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    let host = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        if !after.is_empty() {
            after.strip_prefix(':')?.parse::<u16>().ok()?;
        }
        host
    } else if let Some((host, port)) = text.split_once(':').filter(|(_, p)| !p.contains(':')) {
        port.parse::<u16>().ok()?;
        host
    } else {
        text
    };
    let host = host.split_once('%').map_or(host, |(host, _zone)| host);
    host.parse().ok()
}

/// The `for=` value of one `Forwarded` element (RFC 7239), unquoted.
/// Parameter names are case-insensitive; a value is a token or a quoted
/// string, whose `;`, `,` and `=` are its own.
fn forwarded_for(element: &str) -> Option<Cow<'_, str>> {
    split_from_right(element, b';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| unquote(value.trim()))
    })
}

/// A token as it is; a quoted string without its quotes and escapes.
fn unquote(value: &str) -> Cow<'_, str> {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return Cow::Borrowed(value);
    };
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    Cow::Owned(out)
}

/// `value` split at `separator` outside quoted strings, from the right.
///
/// Read from the right, a `"` opens a quoted string and the next `"` not
/// escaped (not preceded by an odd run of `\`) closes it: so the
/// rightmost pieces read the same whatever the text left of them holds.
fn split_from_right(value: &str, separator: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(value);
    std::iter::from_fn(move || {
        let text = rest?;
        let bytes = text.as_bytes();
        let mut quoted = false;
        let mut at = bytes.len();
        while at > 0 {
            at -= 1;
            match bytes[at] {
                b'"' if !quoted => quoted = true,
                b'"' => {
                    let escapes = bytes[..at]
                        .iter()
                        .rev()
                        .take_while(|&&b| b == b'\\')
                        .count();
                    quoted = escapes % 2 == 1;
                }
                b if b == separator && !quoted => {
                    rest = Some(&text[..at]);
                    return Some(&text[at + 1..]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(text)
    })
}

#[cfg(test)]
mod tests;
