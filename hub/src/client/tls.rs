//! TLS towards an https:// hub: the CA to trust, the client certificate,
//! and a readable reason when the handshake is why a request failed.

use std::path::PathBuf;

use super::{ClientError, ClientResult};

/// How the client talks TLS to an https:// hub (the CLI's flags).
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// Trust only these CA certificates (`--ca-file`); else the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (`--client-cert`, `--client-key`).
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

impl TlsOptions {
    /// Applies these options to `builder` for `server`; errors name the flag.
    /// The client `builder` makes, with these TLS settings for `server`.
    pub(super) fn client(
        &self,
        server: &str,
        builder: reqwest::ClientBuilder,
    ) -> ClientResult<reqwest::Client> {
        self.apply(server, builder)?
            .build()
            .map_err(|e| ClientError::Other(format!("cannot build HTTP client: {e}")))
    }

    fn apply(
        &self,
        server: &str,
        mut builder: reqwest::ClientBuilder,
    ) -> ClientResult<reqwest::ClientBuilder> {
        let any = self.ca_file.is_some() || self.client_cert.is_some() || self.client_key.is_some();
        if any && !server.starts_with("https://") {
            // Never fall back to plain HTTP when TLS was asked for.
            return Err(ClientError::Usage(format!(
                "--ca-file/--client-cert are for an https:// hub, but --server is {server}"
            )));
        }
        let read = |flag: &str, path: &PathBuf| {
            std::fs::read(path)
                .map_err(|e| ClientError::Usage(format!("{flag} {}: {e}", path.display())))
        };
        if let Some(path) = &self.ca_file {
            let certs = reqwest::Certificate::from_pem_bundle(&read("--ca-file", path)?)
                .map_err(|e| ClientError::Usage(format!("--ca-file {}: {e}", path.display())))?;
            if certs.is_empty() {
                return Err(ClientError::Usage(format!(
                    "--ca-file {}: no PEM certificate in it",
                    path.display()
                )));
            }
            builder = builder.tls_certs_only(certs);
        }
        match (&self.client_cert, &self.client_key) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(ClientError::Usage(
                    "--client-key: required with --client-cert".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(ClientError::Usage(
                    "--client-cert: required with --client-key".into(),
                ));
            }
            (Some(cert), Some(key)) => {
                let mut pem = read("--client-cert", cert)?;
                pem.push(b'\n');
                pem.extend(read("--client-key", key)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    ClientError::Usage(format!(
                        "--client-cert {} / --client-key {}: {e}",
                        cert.display(),
                        key.display()
                    ))
                })?;
                builder = builder.identity(identity);
            }
        }
        Ok(builder)
    }

    /// A readable reason for a failed request, when TLS is why.
    pub(super) fn failure(&self, e: &reqwest::Error) -> Option<String> {
        let tls = rustls_error(e)?;
        let trusted = match &self.ca_file {
            Some(path) => format!("--ca-file {}", path.display()),
            None => "the system's trusted roots (give the hub's CA with --ca-file)".to_owned(),
        };
        Some(match tls {
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            ) => format!("the hub's certificate is not valid for the host of --server ({tls})"),
            rustls::Error::InvalidCertificate(_) => {
                format!("the hub's certificate does not chain to {trusted} ({tls})")
            }
            rustls::Error::AlertReceived(_) => format!(
                "the hub refused the handshake ({tls}); a hub with api.tls.clientCaFile \
                 accepts only client certificates signed by that CA"
            ),
            other => other.to_string(),
        })
    }
}

/// The rustls error somewhere in `e`'s causes. An `io::Error`'s
/// `source()` skips the error it wraps (and connectors wrap one io::Error
/// in another), so into those the walk goes through `get_ref()`.
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_error_is_found_inside_nested_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        let outer = std::io::Error::other(inner);
        assert_eq!(rustls_error(&outer), Some(&tls));
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(rustls_error(&plain), None);
    }
}
