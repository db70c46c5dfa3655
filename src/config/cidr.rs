//! `server.trusted_proxies`: the peers whose forwarding headers (`X-Forwarded-*`,
//! `Forwarded`) the gateway believes.
//!
//! A [`Cidr`] is parsed when the configuration is loaded, so a typo stops start-up
//! with the key and the offending entry (`server.trusted_proxies[1]: invalid CIDR
//! "x"`), and the request path only compares integers. A bare address means that one
//! host (`/32` or `/128`). Host bits after the prefix are refused rather than
//! silently masked: `10.0.0.1/8` is more likely a typo than a wish to trust a `/8`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An IPv4 or IPv6 network: an address with its host bits zero, and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cidr {
    V4 { net: u32, len: u8 },
    V6 { net: u128, len: u8 },
}

impl Cidr {
    /// Whether `ip` lies in this network. An IPv4-mapped IPv6 address
    /// (`::ffff:10.0.0.1`, what a dual-stack listener reports) counts as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip.to_canonical()) {
            (Cidr::V4 { net, len }, IpAddr::V4(ip)) => u32::from(ip) & mask4(*len) == *net,
            (Cidr::V6 { net, len }, IpAddr::V6(ip)) => u128::from(ip) & mask6(*len) == *net,
            _ => false,
        }
    }
}

fn mask4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask6(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = &'static str;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| "not an IPv4 or IPv6 address, optionally followed by /prefix")?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(len)
                if (1..=3).contains(&len.len()) && len.bytes().all(|b| b.is_ascii_digit()) =>
            {
                len.parse::<u8>()
                    .ok()
                    .filter(|l| *l <= max)
                    .ok_or("the prefix length is out of range")?
            }
            Some(_) => return Err("the prefix length is not a number"),
        };
        let cidr = match addr {
            IpAddr::V4(a) => Cidr::V4 {
                net: u32::from(a) & mask4(len),
                len,
            },
            IpAddr::V6(a) => Cidr::V6 {
                net: u128::from(a) & mask6(len),
                len,
            },
        };
        if cidr.network() != addr {
            return Err("host bits are set after the prefix (write the network address)");
        }
        Ok(cidr)
    }
}

impl Cidr {
    fn network(&self) -> IpAddr {
        match *self {
            Cidr::V4 { net, .. } => IpAddr::V4(Ipv4Addr::from(net)),
            Cidr::V6 { net, .. } => IpAddr::V6(Ipv6Addr::from(net)),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Cidr::V4 { len, .. } | Cidr::V6 { len, .. } => write!(f, "{}/{len}", self.network()),
        }
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|why| serde::de::Error::custom(format!("invalid CIDR {text:?}: {why}")))
    }
}

/// The networks in `server.trusted_proxies`; empty (the default) trusts nobody.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrustedProxies(pub Vec<Cidr>);

impl TrustedProxies {
    /// Whether a peer at `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v4_and_v6_networks_match_their_members_only() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains(ip("10.1.0.0")) && net.contains(ip("10.1.255.255")));
        assert!(!net.contains(ip("10.2.0.0")) && !net.contains(ip("fd00::1")));
        assert!(
            net.contains(ip("::ffff:10.1.2.3")),
            "IPv4-mapped counts as IPv4"
        );
        let net: Cidr = "fd00:ab::/32".parse().unwrap();
        assert!(net.contains(ip("fd00:ab::1")) && net.contains(ip("fd00:ab:ffff::")));
        assert!(!net.contains(ip("fd00:ac::1")) && !net.contains(ip("10.1.0.0")));
    }

    #[test]
    fn edges_of_the_prefix_length() {
        let any4: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(any4.contains(ip("255.255.255.255")) && !any4.contains(ip("::2")));
        let any6: Cidr = "::/0".parse().unwrap();
        assert!(any6.contains(ip("ffff::1")));
        let host: Cidr = "192.0.2.7".parse().unwrap();
        assert_eq!(host, "192.0.2.7/32".parse().unwrap());
        assert!(host.contains(ip("192.0.2.7")) && !host.contains(ip("192.0.2.6")));
        let host6: Cidr = "2001:db8::1".parse().unwrap();
        assert_eq!(host6.to_string(), "2001:db8::1/128");
    }

    #[test]
    fn refuses_what_is_not_a_network() {
        for bad in [
            "",
            "x",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "10.0.0.0/8/8",
            "10.0.0.0/0008",
            "10.0.0.1/8",
            "fd00::1/64",
            " 10.0.0.0/8",
            "10.0.0/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn round_trips_through_the_configuration() {
        let c =
            Config::from_toml("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n").unwrap();
        let t = &c.server.trusted_proxies;
        assert!(t.contains(ip("10.9.9.9")) && t.contains(ip("::1")));
        assert!(!t.contains(ip("127.0.0.1")));
        let shown = c.to_redacted_toml();
        let back = Config::from_toml(&shown).unwrap();
        assert_eq!(back.server.trusted_proxies, c.server.trusted_proxies);
        assert!(shown.contains("\"::1/128\""), "{shown}");
        assert!(Config::default().server.trusted_proxies.0.is_empty());
    }

    #[test]
    fn a_bad_entry_is_named_with_its_index() {
        let e = Config::from_toml("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`server.trusted_proxies[1]`: invalid CIDR \"x\""),
            "{e}"
        );
    }
}
