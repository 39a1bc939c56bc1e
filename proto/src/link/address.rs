//! The form of a hub link address, one rule for both sides: what a spoke
//! takes as `--hub-url` (one address or several, comma separated), what a
//! hub replica advertises (`link.advertiseUrl`) and sends as
//! `GoAway.redirect_url`. Always `https://host:port`: the link is TLS, and
//! a port is required because no default port is implied.

use std::fmt;

/// Why an address is not a link address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Not an `https://` URL.
    #[error("link address {0:?} must start with https://")]
    Scheme(String),
    /// No numeric port after the host.
    #[error("link address {0:?} must name a port (https://host:port)")]
    Port(String),
    /// Nothing before the port.
    #[error("link address {0:?} names no host")]
    Host(String),
    /// A path, query or user part: the link is one port, nothing else.
    #[error("link address {0:?} must be https://host:port and nothing more")]
    Extra(String),
    /// An empty list.
    #[error("no link address given")]
    Empty,
}

/// A parsed link address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LinkAddress {
    /// `host:port` as dialed (IPv6 hosts in brackets).
    pub authority: String,
    /// The host without IPv6 brackets: the name TLS checks by default.
    pub host: String,
    pub port: u16,
}

impl LinkAddress {
    /// Parses `https://host:port` (a trailing `/` is allowed).
    pub fn parse(url: &str) -> Result<Self, AddressError> {
        let url = url.trim();
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| AddressError::Scheme(url.to_owned()))?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err(AddressError::Extra(url.to_owned()));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => match p.parse::<u16>() {
                Ok(port) if port > 0 => (h, port),
                _ => return Err(AddressError::Port(url.to_owned())),
            },
            None => return Err(AddressError::Port(url.to_owned())),
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(AddressError::Host(url.to_owned()));
        }
        Ok(Self {
            authority: authority.to_owned(),
            host: host.to_owned(),
            port,
        })
    }

    /// Parses a comma-separated list (blanks around commas ignored);
    /// at least one address.
    pub fn parse_list(urls: &str) -> Result<Vec<Self>, AddressError> {
        let list = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(Self::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if list.is_empty() {
            return Err(AddressError::Empty);
        }
        Ok(list)
    }
}

impl fmt::Display for LinkAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "https://{}", self.authority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_host_and_port() {
        let a = LinkAddress::parse("https://hub-0.hub.svc:8443/").unwrap();
        assert_eq!(a.authority, "hub-0.hub.svc:8443");
        assert_eq!(a.host, "hub-0.hub.svc");
        assert_eq!(a.port, 8443);
        assert_eq!(a.to_string(), "https://hub-0.hub.svc:8443");
        let v6 = LinkAddress::parse("https://[::1]:9443").unwrap();
        assert_eq!(
            (v6.authority.as_str(), v6.host.as_str()),
            ("[::1]:9443", "::1")
        );
    }

    #[test]
    fn refuses_what_is_not_an_https_host_port() {
        let cases = [
            (
                "http://hub:8443",
                AddressError::Scheme("http://hub:8443".into()),
            ),
            ("hub:8443", AddressError::Scheme("hub:8443".into())),
            ("https://hub", AddressError::Port("https://hub".into())),
            ("https://hub:0", AddressError::Port("https://hub:0".into())),
            (
                "https://hub:http",
                AddressError::Port("https://hub:http".into()),
            ),
            ("https://:8443", AddressError::Host("https://:8443".into())),
            (
                "https://hub:8443/x",
                AddressError::Extra("https://hub:8443/x".into()),
            ),
            (
                "https://u@hub:8443",
                AddressError::Extra("https://u@hub:8443".into()),
            ),
        ];
        for (url, want) in cases {
            assert_eq!(LinkAddress::parse(url), Err(want), "{url}");
        }
    }

    #[test]
    fn a_list_is_comma_separated() {
        let list = LinkAddress::parse_list(" https://a:1, https://b:2 ,").unwrap();
        assert_eq!(
            list.iter()
                .map(|a| a.authority.as_str())
                .collect::<Vec<_>>(),
            ["a:1", "b:2"]
        );
        assert_eq!(LinkAddress::parse_list(" , "), Err(AddressError::Empty));
        assert!(matches!(
            LinkAddress::parse_list("https://a:1,b:2"),
            Err(AddressError::Scheme(_))
        ));
    }
}
