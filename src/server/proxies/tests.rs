//! Which address a request's forwarding headers name as its client.

use proptest::prelude::*;

use super::*;
use crate::server::KeyExtractor;

fn request(peer: &str, headers: &[(&str, &str)]) -> Parts {
    let mut builder = http::Request::builder();
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let (mut parts, ()) = builder.body(()).unwrap().into_parts();
    let peer: std::net::SocketAddr = peer.parse().unwrap();
    parts.extensions.insert(peer);
    parts
}

/// The key `extractor` gives a request from `peer` with `headers`.
fn key(extractor: &KeyExtractor, peer: &str, headers: &[(&str, &str)]) -> Result<String, String> {
    extractor
        .key_of(&request(peer, headers))
        .map_err(|missing| missing.to_string())
}

fn behind(proxies: TrustedProxies) -> KeyExtractor {
    KeyExtractor::forwarded_ip(proxies)
}

fn internal() -> TrustedProxies {
    TrustedProxies::new(["10.0.0.0/8"]).unwrap()
}

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

#[test]
fn a_bare_address_is_one_host_and_a_range_is_its_prefix() {
    let ranges = TrustedProxies::new(["10.0.0.5", "fd00::1", "10.9.0.0/16"]).unwrap();
    assert!(ranges.trusts("10.0.0.5".parse().unwrap()));
    assert!(!ranges.trusts("10.0.0.6".parse().unwrap()));
    assert!(ranges.trusts("fd00::1".parse().unwrap()));
    assert!(!ranges.trusts("fd00::2".parse().unwrap()));
    // Host bits past the prefix are ignored, as `ip route` does.
    assert!(ranges.trusts("10.9.200.1".parse().unwrap()));
    let err = TrustedProxies::new(["10.0.0.0/x", "fd00::/129"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: trusted_proxies[0]: `10.0.0.0/x` is not an address or a CIDR range (no prefix length); \
         trusted_proxies[1]: `fd00::/129` is not an address or a CIDR range (prefix longer than 128 bits)"
    );
}

/// RFC 7239's values may be quoted strings, whose `,`, `;` and `=` are
/// their own: they split no element and end no parameter.
#[test]
fn forwarded_reads_quoted_values_whole() {
    let standard = behind(internal().forwarded());
    for line in [
        r#"for=198.51.100.2;host="a,b""#,
        r#"for=198.51.100.2;host="a;for=6.6.6.6""#,
        r#"host="x=y,z";for="198.51.100.2:4711""#,
        r#"for="198.51.100.2";by="\"weird\"""#,
        r#"for=6.6.6.6;host="\",", for=198.51.100.2"#,
        "for=198.51.100.2 ; proto=https",
        // An escaped quote does not end a quoted string; an escaped
        // backslash before the closing quote does not escape it.
        r#"for=198.51.100.2;host="a\",b""#,
        r#"for=198.51.100.2;host="a\\", for=198.51.100.2"#,
        // A quoted string may escape any character.
        r#"for="198.51.100.\2""#,
    ] {
        assert_eq!(
            key(&standard, "10.0.0.1:80", &[("forwarded", line)]),
            Ok("198.51.100.2".into()),
            "{line}"
        );
    }
    // An obfuscated or unknown node is no address.
    for line in ["for=_hidden", "for=unknown", r#"for="_a,b""#, "proto=https"] {
        assert!(
            key(&standard, "10.0.0.1:80", &[("forwarded", line)]).is_err(),
            "{line}"
        );
    }
}

/// A link-local client's zone names the proxy's interface; the address
/// is the client.
#[test]
fn an_ipv6_zone_is_dropped_from_the_address() {
    let extractor = behind(internal());
    for value in ["fe80::1%eth0", "[fe80::1%25]:443"] {
        assert_eq!(
            key(&extractor, "10.0.0.1:80", &[("x-forwarded-for", value)]),
            Ok("fe80::/64".into()),
            "{value}"
        );
    }
    let standard = behind(internal().forwarded());
    assert_eq!(
        key(
            &standard,
            "10.0.0.1:80",
            &[("forwarded", r#"for="[fe80::1%eth0]:80""#)]
        ),
        Ok("fe80::/64".into())
    );
    // A port that is no port is no address.
    assert!(
        key(
            &extractor,
            "10.0.0.1:80",
            &[("x-forwarded-for", "1.2.3.4:http")]
        )
        .is_err()
    );
    assert!(key(&extractor, "10.0.0.1:80", &[("x-forwarded-for", "[::1]x")]).is_err());
}

/// `X-Real-IP`, `CF-Connecting-IP` and `True-Client-IP` hold the one
/// address the edge saw: believed from a trusted peer only, the peer
/// itself without one, and no key when there are two (one may be the
/// client's).
#[test]
fn one_address_headers_are_believed_only_from_a_trusted_peer() {
    for (extractor, name) in [
        (behind(internal().x_real_ip()), "x-real-ip"),
        (behind(internal().cf_connecting_ip()), "cf-connecting-ip"),
        (behind(internal().true_client_ip()), "true-client-ip"),
    ] {
        let set = [(name, "198.51.100.9"), ("x-forwarded-for", "7.7.7.7")];
        assert_eq!(
            key(&extractor, "10.0.0.1:80", &set),
            Ok("198.51.100.9".into()),
            "{name}"
        );
        assert_eq!(
            key(&extractor, "192.0.2.1:80", &set),
            Ok("192.0.2.1".into()),
            "{name}"
        );
        assert_eq!(
            key(&extractor, "10.0.0.1:80", &[]),
            Ok("10.0.0.1".into()),
            "{name}"
        );
        let twice = [(name, "6.6.6.6"), (name, "198.51.100.9")];
        assert_eq!(
            key(&extractor, "10.0.0.1:80", &twice),
            Err(format!(
                "missing client key: header `{name}` is given twice"
            )),
        );
        let list = [(name, "6.6.6.6, 198.51.100.9")];
        assert!(key(&extractor, "10.0.0.1:80", &list).is_err(), "{name}");
        let v6 = [(name, "2001:db8:1:2::99")];
        assert_eq!(
            key(&extractor, "10.0.0.1:80", &v6),
            Ok("2001:db8:1:2::/64".into())
        );
    }
}

/// What a client may write in a forwarding header: any printable text,
/// quotes, backslashes and separators above all.
fn client_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,40}",
        "[\"\\\\,;= a-z0-9.:\\[\\]_]{0,40}",
        Just(r#"for=""#.to_owned()),
        Just(r#"for="\"#.to_owned()),
    ]
}

proptest! {
    /// Whatever a client writes left of a trusted proxy's entry, the key
    /// is the address that proxy wrote: the client cannot choose it.
    #[test]
    fn a_client_cannot_choose_its_key_by_what_it_writes_left_of_a_proxy(
        forged in client_text(),
        same_line in any::<bool>(),
        two_hops in any::<bool>(),
    ) {
        let hop = if two_hops { ", 10.0.0.9" } else { "" };
        let standard_hop = if two_hops { r#", for="10.0.0.9:80""# } else { "" };
        for (extractor, name, appended) in [
            (behind(internal()), "x-forwarded-for", format!("198.51.100.7{hop}")),
            (behind(internal().forwarded()), "forwarded", format!(r#"for="[2001:db8::7]:4711"{standard_hop}"#)),
            (behind(internal().forwarded()), "forwarded", format!("for=198.51.100.7;proto=https{standard_hop}")),
        ] {
            let Ok(forged_value) = http::HeaderValue::from_str(&forged) else { continue };
            let mut parts = request("10.0.0.1:80", &[]);
            if same_line {
                let line = format!("{forged}, {appended}");
                parts.headers.append(name, http::HeaderValue::from_str(&line).unwrap());
            } else {
                parts.headers.append(name, forged_value);
                parts.headers.append(name, http::HeaderValue::from_str(&appended).unwrap());
            }
            let key = extractor.key_of(&parts).map_err(|m| m.to_string());
            let expected = if name == "forwarded" && appended.contains("2001") {
                "2001:db8::/64"
            } else {
                "198.51.100.7"
            };
            prop_assert_eq!(key, Ok(expected.to_owned()), "{}: {:?}", name, parts.headers);
        }
    }

    /// No bytes in any forwarding header panic the extractor.
    #[test]
    fn no_forwarding_header_panics_the_extractor(
        values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 1..4),
        trusted_peer in any::<bool>(),
    ) {
        let peer = if trusted_peer { "10.0.0.1:80" } else { "192.0.2.1:80" };
        for (extractor, name) in [
            (behind(internal()), "x-forwarded-for"),
            (behind(internal().forwarded()), "forwarded"),
            (behind(internal().x_real_ip()), "x-real-ip"),
        ] {
            let mut parts = request(peer, &[]);
            for value in &values {
                if let Ok(value) = http::HeaderValue::from_bytes(value) {
                    parts.headers.append(name, value);
                }
            }
            let _ = extractor.key_of(&parts);
        }
    }
}
