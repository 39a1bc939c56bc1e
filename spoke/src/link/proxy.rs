//! The spoke's way out of an air-gapped cluster: every connection it opens
//! to the hub (enrollment, the Connect stream, renewals, tunnel streams)
//! can go through an HTTP CONNECT proxy. The proxy only relays bytes: the
//! TLS session, and so the mTLS identity of both ends, is between the spoke
//! and the hub, inside the tunnel.
//!
//! Which proxy, if any: the spoke's `--hub-proxy` (`CLAWFED_HUB_PROXY`)
//! when given (`direct` turns the proxy off), else `HTTPS_PROXY` /
//! `https_proxy` unless `NO_PROXY` / `no_proxy` names the hub. Parsing and
//! matching are pure ([`select`], [`Proxy::parse`], [`no_proxy_matches`]);
//! [`Proxy::connect`] does the CONNECT exchange.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The value of `--hub-proxy` that turns the proxy off whatever the
/// environment says.
pub const DIRECT: &str = "direct";

/// How long the TCP connection to the proxy may take. Shorter than the
/// link's connect timeout (10 s), so a proxy that drops SYNs is reported as
/// the proxy, not as a generic timeout.
const PROXY_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a proxy's answer to CONNECT may hold (status line and headers).
const MAX_RESPONSE_HEAD: u64 = 16 * 1024;

/// A proxy setting that cannot be used; names the flag, variable or file.
#[derive(Debug, thiserror::Error)]
pub enum ProxyConfigError {
    /// The proxy URL is malformed or of an unsupported kind.
    #[error("{field}: {reason}")]
    Invalid {
        /// The flag or environment variable holding it.
        field: String,
        /// What is wrong (never the URL's credentials).
        reason: String,
    },
    /// The credentials file cannot be read.
    #[error("{field}: cannot read {path}")]
    CredentialsFile {
        field: String,
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Connecting to the hub through the proxy failed.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The proxy did not accept the TCP connection (down, filtered, wrong
    /// address).
    #[error("proxy {proxy} unreachable")]
    Unreachable {
        proxy: String,
        #[source]
        source: io::Error,
    },
    /// The proxy answered CONNECT with a status other than 2xx.
    #[error("proxy {proxy} refused CONNECT {target}: {status} {reason}{hint}", hint = refusal_hint(.status, .credentials_sent))]
    Refused {
        proxy: String,
        target: String,
        status: u16,
        /// The reason phrase the proxy sent.
        reason: String,
        /// Whether the request carried Proxy-Authorization.
        credentials_sent: bool,
    },
    /// The connection broke during the CONNECT exchange.
    #[error("proxy {proxy} broke off the CONNECT exchange")]
    Exchange {
        proxy: String,
        #[source]
        source: io::Error,
    },
    /// The proxy's answer is not an HTTP response head.
    #[error("proxy {proxy} answered CONNECT with no valid HTTP response: {detail}")]
    BadResponse { proxy: String, detail: String },
}

fn refusal_hint(status: &u16, credentials_sent: &bool) -> &'static str {
    // Some proxies (tinyproxy 1.11) answer wrong credentials with 401
    // instead of 407: both are authentication refusals here.
    match (*status, *credentials_sent) {
        (401 | 407, false) => " (no proxy credentials configured)",
        (401 | 407, true) => " (proxy credentials rejected)",
        _ => "",
    }
}

impl ProxyError {
    /// The error with its cause, as the spoke logs and reports it, e.g.
    /// `proxy 127.0.0.1:3128 unreachable: connection refused`.
    pub fn report(&self) -> String {
        match self {
            Self::Unreachable { source, .. } | Self::Exchange { source, .. } => {
                format!("{self}: {}", io_cause(source))
            }
            Self::Refused { .. } | Self::BadResponse { .. } => self.to_string(),
        }
    }

    /// Whether the proxy refused for want of (valid) credentials.
    pub fn is_auth_refusal(&self) -> bool {
        matches!(
            self,
            Self::Refused {
                status: 401 | 407,
                ..
            }
        )
    }
}

/// An I/O cause in words: the kind for the common network failures
/// ("connection refused"), without the OS error number.
fn io_cause(e: &io::Error) -> String {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused
        | K::ConnectionReset
        | K::ConnectionAborted
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::TimedOut
        | K::UnexpectedEof
        | K::AddrNotAvailable => e.kind().to_string(),
        _ => e.to_string(),
    }
}

/// Basic credentials for the proxy; never printed.
#[derive(Clone, PartialEq, Eq)]
struct Credentials {
    user: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

impl Credentials {
    fn header(&self) -> String {
        let raw = format!("{}:{}", self.user, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

/// An HTTP CONNECT proxy: where it listens and how to authenticate.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// `host:port` of the proxy.
    authority: String,
    credentials: Option<Credentials>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("authority", &self.authority)
            .field("credentials", &self.credentials.is_some())
            .finish()
    }
}

impl fmt::Display for Proxy {
    /// The proxy's address only: safe to log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.authority)
    }
}

impl Proxy {
    /// Parses `http://[user[:password]@]host[:port][/]` (the scheme may be
    /// left out; the port defaults to 80, as curl and Go do for http).
    /// `field` names where the value came from, for the error.
    pub fn parse(value: &str, field: &str) -> Result<Self, ProxyConfigError> {
        let invalid = |reason: String| ProxyConfigError::Invalid {
            field: field.to_owned(),
            reason,
        };
        let value = value.trim();
        let rest = match value.split_once("://") {
            Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
                "http" => rest,
                "https" => {
                    return Err(invalid(
                        "https:// proxies (TLS to the proxy) are not supported; use http:// \
                         (the link to the hub is TLS inside the tunnel either way)"
                            .into(),
                    ));
                }
                other => {
                    return Err(invalid(format!(
                        "proxy scheme {other:?} is not supported; use http://"
                    )));
                }
            },
            None => value,
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(invalid("a proxy URL has no path or query".into()));
        }
        // The last '@' ends the userinfo: a password may hold one.
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let credentials = match userinfo {
            Some(u) => {
                let (user, password) = u.split_once(':').unwrap_or((u, ""));
                let decode = |s: &str, what: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8()
                        .map(|c| c.into_owned())
                        .map_err(|_| invalid(format!("the proxy {what} is not UTF-8")))
                };
                let user = decode(user, "user")?;
                if user.is_empty() {
                    return Err(invalid(
                        "the proxy URL has credentials without a user".into(),
                    ));
                }
                Some(Credentials {
                    user,
                    password: decode(password, "password")?,
                })
            }
            None => None,
        };
        let (host, port) = split_host_port(host_port).map_err(invalid)?;
        let port = port.unwrap_or(80);
        if host.is_empty() {
            return Err(invalid("the proxy URL names no host".into()));
        }
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Self {
            authority,
            credentials,
        })
    }

    /// Replaces the credentials with `user:password` read from `path` (a
    /// file or a mounted Secret key; surrounding whitespace is ignored).
    pub fn with_credentials_file(self, path: &Path, field: &str) -> Result<Self, ProxyConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ProxyConfigError::CredentialsFile {
                field: field.to_owned(),
                path: path.display().to_string(),
                source,
            })?;
        let text = text.trim();
        let Some((user, password)) = text.split_once(':') else {
            return Err(ProxyConfigError::Invalid {
                field: field.to_owned(),
                reason: format!("{} must hold user:password", path.display()),
            });
        };
        if user.is_empty() {
            return Err(ProxyConfigError::Invalid {
                field: field.to_owned(),
                reason: format!("{} names no user", path.display()),
            });
        }
        Ok(Self {
            credentials: Some(Credentials {
                user: user.to_owned(),
                password: password.to_owned(),
            }),
            ..self
        })
    }

    /// `host:port` of the proxy.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// Whether Basic credentials are sent.
    pub fn has_credentials(&self) -> bool {
        self.credentials.is_some()
    }

    /// The CONNECT request for `target` (`host:port`).
    fn request(&self, target: &str) -> String {
        let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
        if let Some(c) = &self.credentials {
            request.push_str("Proxy-Authorization: ");
            request.push_str(&c.header());
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        request
    }

    /// Connects to the proxy and asks it for a tunnel to `target`
    /// (`host:port`); returns the connection once the proxy answered 2xx,
    /// ready for the TLS handshake with the hub.
    pub async fn connect(&self, target: &str) -> Result<TcpStream, ProxyError> {
        let proxy = || self.authority.clone();
        let tcp =
            match tokio::time::timeout(PROXY_CONNECT_TIMEOUT, TcpStream::connect(&self.authority))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(io::Error::from(io::ErrorKind::TimedOut)),
            }
            .map_err(|source| ProxyError::Unreachable {
                proxy: proxy(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let exchange = |source| ProxyError::Exchange {
            proxy: proxy(),
            source,
        };
        let mut reader = BufReader::new(tcp);
        reader
            .get_mut()
            .write_all(self.request(target).as_bytes())
            .await
            .map_err(exchange)?;
        let status_line = read_response_head(&mut reader).await.map_err(exchange)?;
        let Some((status, reason)) = parse_status_line(&status_line) else {
            return Err(ProxyError::BadResponse {
                proxy: proxy(),
                detail: format!("status line {:?}", status_line.trim_end()),
            });
        };
        if !(200..300).contains(&status) {
            return Err(ProxyError::Refused {
                proxy: proxy(),
                target: target.to_owned(),
                status,
                reason,
                credentials_sent: self.credentials.is_some(),
            });
        }
        // The hub speaks only after the spoke's ClientHello: bytes already
        // here would be lost to TLS, so they are an error, never dropped.
        if !reader.buffer().is_empty() {
            return Err(ProxyError::BadResponse {
                proxy: proxy(),
                detail: "data after the response head, before TLS began".into(),
            });
        }
        Ok(reader.into_inner())
    }
}

/// Reads the response head up to its empty line and returns the status
/// line. Reads no further than the head (the buffer may hold more, which
/// the caller checks).
async fn read_response_head(reader: &mut BufReader<TcpStream>) -> io::Result<String> {
    let mut limited = (&mut *reader).take(MAX_RESPONSE_HEAD);
    let mut status_line = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = limited.read_line(&mut line).await?;
        if n == 0 || !line.ends_with('\n') {
            let what = if limited.limit() == 0 {
                "response head longer than 16 KiB"
            } else {
                "connection closed before the end of the response head"
            };
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, what));
        }
        if status_line.is_empty() {
            status_line = line.clone();
        } else if line == "\r\n" || line == "\n" {
            return Ok(status_line);
        }
    }
}

/// `HTTP/1.x SSS reason` → (SSS, reason).
fn parse_status_line(line: &str) -> Option<(u16, String)> {
    let line = line.trim_end_matches(['\r', '\n']);
    let rest = line.strip_prefix("HTTP/1.")?;
    let (_minor, rest) = rest.split_once(' ')?;
    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    if code.len() != 3 {
        return None;
    }
    let status = code.parse::<u16>().ok()?;
    (100..600)
        .contains(&status)
        .then(|| (status, reason.trim().to_owned()))
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("port {p:?} is not a port number"))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed '[' in the host".to_string())?;
        return match after {
            "" => Ok((host.to_owned(), None)),
            a => match a.strip_prefix(':') {
                Some(p) => Ok((host.to_owned(), Some(port(p)?))),
                None => Err(format!("unexpected {a:?} after the host")),
            },
        };
    }
    match s.rsplit_once(':') {
        Some((host, p)) if !host.contains(':') => Ok((host.to_owned(), Some(port(p)?))),
        // An unbracketed IPv6 address.
        Some(_) if s.parse::<IpAddr>().is_ok() => Ok((s.to_owned(), None)),
        Some(_) => Err(format!("{s:?} is not host:port")),
        None => Ok((s.to_owned(), None)),
    }
}

/// Whether the `NO_PROXY` list `list` exempts `host:port` from the proxy,
/// by the rules curl and Go share: entries separated by commas (or
/// whitespace); `*` matches everything; an IP address matches that address,
/// a CIDR block (`198.18.0.0/15`) every address in it; any other entry is a
/// domain matching itself and its subdomains (`example.com` and
/// `.example.com` alike); an entry may carry `:port` to match that port only.
pub fn no_proxy_matches(list: &str, host: &str, port: u16) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let host_ip = host.parse::<IpAddr>().ok();
    list.split([',', ' ', '\t', '\n'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| entry_matches(entry, &host, host_ip, port))
}

fn entry_matches(entry: &str, host: &str, host_ip: Option<IpAddr>, port: u16) -> bool {
    if entry == "*" {
        return true;
    }
    if let Ok(net) = entry.parse::<ipnet::IpNet>() {
        return host_ip.is_some_and(|ip| net.contains(&ip));
    }
    let (name, entry_port) = match split_host_port(entry) {
        Ok((name, p)) => (name, p),
        Err(_) => return false,
    };
    if entry_port.is_some_and(|p| p != port) {
        return false;
    }
    if let Ok(ip) = name.parse::<IpAddr>() {
        return host_ip == Some(ip);
    }
    // An address is matched by address entries only, never by suffix.
    if host_ip.is_some() {
        return false;
    }
    let domain = name
        .trim_start_matches("*.")
        .trim_start_matches('.')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    !domain.is_empty()
        && (host == domain
            || host
                .strip_suffix(&domain)
                .is_some_and(|head| head.ends_with('.')))
}

/// The proxy for a hub at `host:port`, if any: `explicit` (the spoke's
/// `--hub-proxy`, named `explicit_field`) when given, `direct` for none;
/// else `HTTPS_PROXY` / `https_proxy` from `env` unless `NO_PROXY` /
/// `no_proxy` exempts the hub. Empty variables count as unset. `env` is
/// the environment (`|k| std::env::var(k).ok()` in the binary).
pub fn select(
    host: &str,
    port: u16,
    explicit: Option<&str>,
    explicit_field: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Proxy>, ProxyConfigError> {
    if let Some(value) = explicit.map(str::trim).filter(|v| !v.is_empty()) {
        if value.eq_ignore_ascii_case(DIRECT) {
            return Ok(None);
        }
        return Proxy::parse(value, explicit_field).map(Some);
    }
    let first = |names: [&'static str; 2]| {
        names
            .into_iter()
            .find_map(|n| env(n).filter(|v| !v.trim().is_empty()).map(|v| (n, v)))
    };
    let Some((field, value)) = first(["HTTPS_PROXY", "https_proxy"]) else {
        return Ok(None);
    };
    if let Some((_, list)) = first(["NO_PROXY", "no_proxy"])
        && no_proxy_matches(&list, host, port)
    {
        return Ok(None);
    }
    Proxy::parse(&value, field).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_urls() {
        let p = Proxy::parse("http://127.0.0.1:3128", "HTTPS_PROXY").unwrap();
        assert_eq!(p.authority(), "127.0.0.1:3128");
        assert!(!p.has_credentials());
        // No scheme means http; no port means 80; a trailing slash is fine.
        assert_eq!(
            Proxy::parse("proxy.corp/", "x").unwrap().authority(),
            "proxy.corp:80"
        );
        assert_eq!(
            Proxy::parse("http://[::1]:3128", "x").unwrap().authority(),
            "[::1]:3128"
        );
        let p = Proxy::parse("http://us%40er:p%3Ass@w@proxy:8080", "x").unwrap();
        assert_eq!(p.authority(), "proxy:8080");
        assert_eq!(
            p.credentials,
            Some(Credentials {
                user: "us@er".into(),
                password: "p:ss@w".into()
            })
        );
    }

    #[test]
    fn bad_proxy_urls_name_the_field_and_hide_the_password() {
        for (value, says) in [
            ("https://proxy:3128", "not supported"),
            ("socks5://proxy:1080", "\"socks5\""),
            ("http://proxy:99999", "port"),
            ("http://proxy:3128/path", "no path"),
            ("http://:3128", "no host"),
            ("http://:secret@proxy:3128", "without a user"),
            ("http://u:secret@[::1:3128", "unclosed"),
        ] {
            let e = Proxy::parse(value, "HTTPS_PROXY").unwrap_err().to_string();
            assert!(e.starts_with("HTTPS_PROXY: "), "{value}: {e}");
            assert!(e.contains(says), "{value}: {e}");
            assert!(!e.contains("secret"), "{value}: {e}");
        }
    }

    #[test]
    fn credentials_are_never_printed() {
        let p = Proxy::parse("http://user:hunter2@proxy:3128", "x").unwrap();
        for shown in [format!("{p}"), format!("{p:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(!shown.contains("user"), "{shown}");
        }
        assert!(p.request("hub:8443").contains(&format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode("user:hunter2")
        )));
    }

    #[test]
    fn a_credentials_file_overrides_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("creds");
        std::fs::write(&file, "spoke:from-file\n").unwrap();
        let p = Proxy::parse("http://url:pw@proxy:3128", "x")
            .unwrap()
            .with_credentials_file(&file, "--hub-proxy-credentials-file")
            .unwrap();
        assert_eq!(
            p.credentials,
            Some(Credentials {
                user: "spoke".into(),
                password: "from-file".into()
            })
        );
        std::fs::write(&file, "no-colon").unwrap();
        let e = Proxy::parse("proxy:3128", "x")
            .unwrap()
            .with_credentials_file(&file, "--hub-proxy-credentials-file")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--hub-proxy-credentials-file: "), "{e}");
        let e = Proxy::parse("proxy:3128", "x")
            .unwrap()
            .with_credentials_file(&dir.path().join("absent"), "--f")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--f: cannot read"), "{e}");
    }

    #[test]
    fn no_proxy_rules() {
        let cases: &[(&str, &str, u16, bool)] = &[
            ("", "hub.example", 8443, false),
            ("*", "hub.example", 8443, true),
            ("*", "127.0.0.1", 8443, true),
            ("hub.example", "hub.example", 8443, true),
            ("HUB.example.", "hub.Example", 8443, true),
            ("example", "hub.example", 8443, true),
            (".example", "hub.example", 8443, true),
            ("*.example", "hub.example", 8443, true),
            ("ample", "hub.example", 8443, false),
            ("other.example", "hub.example", 8443, false),
            ("sub.hub.example", "hub.example", 8443, false),
            ("localhost, 127.0.0.1", "127.0.0.1", 8443, true),
            ("127.0.0.2", "127.0.0.1", 8443, false),
            ("127.0.0.0/8", "127.0.0.1", 8443, true),
            ("198.18.0.0/15", "198.19.3.4", 8443, true),
            ("198.18.0.0/16", "198.19.3.4", 8443, false),
            ("::1", "[::1]", 8443, true),
            ("fd00::/8", "fd00::5", 8443, true),
            ("hub.example:8443", "hub.example", 8443, true),
            ("hub.example:9443", "hub.example", 8443, false),
            ("127.0.0.1:8443", "127.0.0.1", 8443, true),
            ("[::1]:9", "::1", 8443, false),
            (
                "a.example other.example\thub.example",
                "hub.example",
                1,
                true,
            ),
            // A domain entry never matches an IP host by suffix.
            ("0.0.1", "127.0.0.1", 8443, false),
        ];
        for &(list, host, port, expected) in cases {
            assert_eq!(
                no_proxy_matches(list, host, port),
                expected,
                "NO_PROXY={list:?} host {host}:{port}"
            );
        }
    }

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn selection_order() {
        let pick = |explicit: Option<&str>, vars| {
            select("hub.example", 8443, explicit, "--hub-proxy", &env(vars))
                .map(|p| p.map(|p| p.authority().to_owned()))
        };
        assert_eq!(pick(None, &[]).unwrap(), None);
        assert_eq!(
            pick(None, &[("https_proxy", "http://low:1")]).unwrap(),
            Some("low:1".into())
        );
        // Upper case first; an empty variable is unset.
        assert_eq!(
            pick(
                None,
                &[
                    ("HTTPS_PROXY", "http://up:1"),
                    ("https_proxy", "http://low:1")
                ]
            )
            .unwrap(),
            Some("up:1".into())
        );
        assert_eq!(
            pick(
                None,
                &[("HTTPS_PROXY", " "), ("https_proxy", "http://low:1")]
            )
            .unwrap(),
            Some("low:1".into())
        );
        // NO_PROXY exempts the hub.
        assert_eq!(
            pick(
                None,
                &[("HTTPS_PROXY", "http://up:1"), ("no_proxy", ".example")]
            )
            .unwrap(),
            None
        );
        // The explicit setting wins over HTTPS_PROXY and NO_PROXY.
        assert_eq!(
            pick(
                Some("http://mine:2"),
                &[("HTTPS_PROXY", "http://up:1"), ("NO_PROXY", "*")]
            )
            .unwrap(),
            Some("mine:2".into())
        );
        assert_eq!(
            pick(Some("direct"), &[("HTTPS_PROXY", "http://up:1")]).unwrap(),
            None
        );
        // Errors name where the value came from.
        let e = pick(None, &[("https_proxy", "socks5://x:1")]).unwrap_err();
        assert!(e.to_string().starts_with("https_proxy: "), "{e}");
        let e = pick(Some("ftp://x"), &[]).unwrap_err();
        assert!(e.to_string().starts_with("--hub-proxy: "), "{e}");
    }

    #[test]
    fn status_lines() {
        assert_eq!(
            parse_status_line("HTTP/1.1 200 Connection established\r\n"),
            Some((200, "Connection established".into()))
        );
        assert_eq!(
            parse_status_line("HTTP/1.0 407 Proxy Authentication Required\r\n"),
            Some((407, "Proxy Authentication Required".into()))
        );
        assert_eq!(
            parse_status_line("HTTP/1.1 200\r\n"),
            Some((200, "".into()))
        );
        for bad in [
            "SSH-2.0-OpenSSH\r\n",
            "HTTP/1.1 2000 OK\r\n",
            "HTTP/2 200 OK\r\n",
            "",
        ] {
            assert_eq!(parse_status_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn refusals_name_the_status_and_whether_credentials_went() {
        let refused = |status, reason: &str, credentials_sent| ProxyError::Refused {
            proxy: "127.0.0.1:3128".into(),
            target: "hub:8443".into(),
            status,
            reason: reason.into(),
            credentials_sent,
        };
        let e = refused(407, "Proxy Authentication Required", false);
        assert_eq!(
            e.report(),
            "proxy 127.0.0.1:3128 refused CONNECT hub:8443: 407 Proxy Authentication Required \
             (no proxy credentials configured)"
        );
        assert!(e.is_auth_refusal());
        assert!(
            refused(407, "Proxy Authentication Required", true)
                .report()
                .ends_with("(proxy credentials rejected)")
        );
        let e = refused(403, "Access violation", true);
        assert_eq!(
            e.report(),
            "proxy 127.0.0.1:3128 refused CONNECT hub:8443: 403 Access violation"
        );
        assert!(!e.is_auth_refusal());
        let down = ProxyError::Unreachable {
            proxy: "127.0.0.1:3128".into(),
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(
            down.report(),
            "proxy 127.0.0.1:3128 unreachable: connection refused"
        );
    }
}
