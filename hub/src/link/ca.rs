//! The hub's certificate authority for the spoke link (rcgen).
//!
//! [`CertificateAuthority::load_or_create`] keeps a CA as `ca.key` (mode
//! 0600) beside `ca.crt` in a directory (an operator's CA, tests); the hub
//! itself uses the shared one in the store (below).
//! It signs short-lived client certificates whose only identity is a URI SAN
//! naming one cluster id; whatever names a CSR asks for are ignored, so a
//! spoke cannot choose its own identity.
//!
//! Hub replicas share one CA through the store ([`load_or_create_shared`]):
//! the certificate in clear, the key sealed with the hub's secrets key, both
//! under the hub secret [`SHARED_CA_SECRET`]. The first replica to start
//! stores it (importing an existing CA directory, the migration path of a
//! single-hub install); every other one loads it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Errors of the certificate authority.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Reading or writing the CA files failed.
    #[error("CA file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The stored CA key or certificate could not be used.
    #[error("CA material in {path} is invalid: {source}")]
    Invalid {
        path: PathBuf,
        #[source]
        source: rcgen::Error,
    },
    /// Only one of ca.key / ca.crt exists.
    #[error("CA directory {0} holds only one of ca.key and ca.crt")]
    Incomplete(PathBuf),
    /// The CSR is malformed or its signature does not verify.
    #[error("invalid certificate signing request: {0}")]
    BadCsr(#[source] rcgen::Error),
    /// Signing failed.
    #[error("signing failed: {0}")]
    Sign(#[source] rcgen::Error),
    /// The shared CA could not be read from or written to the store.
    #[error("shared link CA in the store")]
    Store(#[source] crate::store::StoreError),
    /// The shared CA key could not be sealed or opened with the hub's
    /// secrets key (replicas must share secrets.keyFile / keySecret).
    #[error(
        "shared link CA key (if the secrets key it was sealed with is lost for good, `clawfed-hub cluster ca reset` replaces the CA)"
    )]
    Secrets(#[source] crate::secrets::SecretsError),
    /// A reset of the shared CA was refused (it still opens, or it
    /// changed meanwhile).
    #[error("link CA reset refused: {0}")]
    ResetRefused(String),
    /// The shared CA stored in the database is not usable.
    #[error("shared link CA in the store is invalid: {0}")]
    StoredInvalid(String),
}

/// The hub secret (`hub_secrets`) holding the shared link CA.
pub const SHARED_CA_SECRET: &str = "link-ca";

/// The shared CA as stored: the certificate and the sealed key token.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredCa {
    version: u32,
    cert_pem: String,
    /// [`crate::secrets::Sealed::to_token`] of the key PEM.
    sealed_key: String,
}

/// Where the CA a replica uses came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaOrigin {
    /// Another replica (or an earlier start) stored it.
    Loaded,
    /// This replica generated it and stored it first.
    Created,
    /// This replica imported it from the CA directory and stored it first.
    Imported,
}

/// The link CA every replica on `store` shares: the stored one, else the
/// CA in `ca_dir` (when it holds `ca.key` and `ca.crt`) or a new one,
/// stored now. The first writer wins, so replicas starting together agree.
/// A CA directory that differs from the stored CA is ignored (with a
/// warning): the store is the one source of trust. The certificate (never
/// the key) is written to `ca_dir/ca.crt` when the directory holds no key,
/// for operators and spokes that read it from there.
pub async fn load_or_create_shared(
    store: &dyn crate::store::Store,
    secrets: &crate::secrets::SecretBox,
    ca_dir: Option<&Path>,
) -> Result<(CertificateAuthority, CaOrigin), CaError> {
    let from_dir = match ca_dir {
        Some(dir) => load_dir(dir)?,
        None => None,
    };
    let (candidate, origin) = match from_dir {
        Some(ca) => (ca, CaOrigin::Imported),
        None => (
            CertificateAuthority::generate().map_err(CaError::Sign)?,
            CaOrigin::Created,
        ),
    };
    let record = stored_record(&candidate, secrets)?;
    let stored = store
        .hub_secret(SHARED_CA_SECRET, &record)
        .await
        .map_err(CaError::Store)?;
    let (ca, origin) = if stored == record {
        (candidate, origin)
    } else {
        let ca = open_stored(&stored, secrets)?;
        if origin == CaOrigin::Imported && candidate.ca_pem != ca.ca_pem {
            tracing::warn!(
                dir = %ca_dir.map(|d| d.display().to_string()).unwrap_or_default(),
                "link.ca_dir_ignored: the store holds another CA, which every replica uses"
            );
        }
        (ca, CaOrigin::Loaded)
    };
    if let Some(dir) = ca_dir {
        export_certificate(dir, &ca);
    }
    Ok((ca, origin))
}

/// What [`reset_unreadable_shared`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaReset {
    /// The stored CA could not be opened and was replaced.
    Replaced,
    /// No CA was stored: the new one is simply the first.
    Created,
}

/// Recovery after the secrets key that sealed the shared link CA is lost:
/// stores a new CA sealed with `secrets` in place of the one that no
/// longer opens, and exports its certificate to `ca_dir` as replicas do.
/// Refuses while the stored CA still opens: replacing a working CA cuts
/// every spoke off, which is never a side effect of a recovery command.
/// Afterwards every replica must restart, and every spoke must pin the new
/// CA and re-enroll (a bootstrap token created with `--reenroll`).
pub async fn reset_unreadable_shared(
    store: &dyn crate::store::Store,
    secrets: &crate::secrets::SecretBox,
    ca_dir: Option<&Path>,
) -> Result<(CertificateAuthority, CaReset), CaError> {
    let candidate = CertificateAuthority::generate().map_err(CaError::Sign)?;
    let record = stored_record(&candidate, secrets)?;
    let stored = store
        .hub_secret(SHARED_CA_SECRET, &record)
        .await
        .map_err(CaError::Store)?;
    let outcome = if stored == record {
        CaReset::Created
    } else {
        if open_stored(&stored, secrets).is_ok() {
            return Err(CaError::ResetRefused(
                "the stored link CA opens with this hub's secrets key; nothing to recover".into(),
            ));
        }
        if !store
            .replace_hub_secret(SHARED_CA_SECRET, &stored, &record)
            .await
            .map_err(CaError::Store)?
        {
            return Err(CaError::ResetRefused(
                "the stored link CA changed meanwhile; run the command again".into(),
            ));
        }
        CaReset::Replaced
    };
    if let Some(dir) = ca_dir {
        export_certificate(dir, &candidate);
    }
    Ok((candidate, outcome))
}

/// `ca` as stored: its certificate, and its key sealed with `secrets`.
fn stored_record(
    ca: &CertificateAuthority,
    secrets: &crate::secrets::SecretBox,
) -> Result<String, CaError> {
    let key_pem = crate::secrets::SecretValue::new(ca.issuer.key().serialize_pem());
    let sealed = secrets
        .seal_hub_secret(SHARED_CA_SECRET, &key_pem)
        .map_err(CaError::Secrets)?;
    serde_json::to_string(&StoredCa {
        version: 1,
        cert_pem: ca.ca_pem.clone(),
        sealed_key: sealed.to_token(),
    })
    .map_err(|e| CaError::StoredInvalid(format!("cannot encode: {e}")))
}

/// Parses and opens the stored CA record.
fn open_stored(
    stored: &str,
    secrets: &crate::secrets::SecretBox,
) -> Result<CertificateAuthority, CaError> {
    let stored: StoredCa = serde_json::from_str(stored)
        .map_err(|e| CaError::StoredInvalid(format!("not the expected JSON: {e}")))?;
    if stored.version != 1 {
        return Err(CaError::StoredInvalid(format!(
            "unknown version {}",
            stored.version
        )));
    }
    let sealed = crate::secrets::Sealed::from_token(&stored.sealed_key)
        .ok_or_else(|| CaError::StoredInvalid("the key is not a sealed token".into()))?;
    let key_pem = secrets
        .open_hub_secret(SHARED_CA_SECRET, &sealed)
        .map_err(CaError::Secrets)?;
    CertificateAuthority::from_pem(&stored.cert_pem, key_pem.expose())
        .map_err(|e| CaError::StoredInvalid(format!("the certificate or key: {e}")))
}

/// Writes the CA certificate to `dir/ca.crt` unless the directory holds a
/// key (an operator's CA, possibly a read-only mount) or the file is
/// current. Best effort: the store, not the file, is what replicas use.
fn export_certificate(dir: &Path, ca: &CertificateAuthority) {
    if dir.join("ca.key").exists() {
        return;
    }
    let path = dir.join("ca.crt");
    if std::fs::read_to_string(&path).is_ok_and(|pem| pem == ca.ca_pem) {
        return;
    }
    let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &ca.ca_pem));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "link.ca_export_failed");
    }
}

/// The CA in `dir`, or `None` when the directory holds no key (none at
/// all, or only the certificate [`export_certificate`] wrote).
fn load_dir(dir: &Path) -> Result<Option<CertificateAuthority>, CaError> {
    let key_path = dir.join("ca.key");
    let cert_path = dir.join("ca.crt");
    match (key_path.exists(), cert_path.exists()) {
        (true, true) => CertificateAuthority::load_or_create(dir).map(Some),
        (false, _) => Ok(None),
        (true, false) => Err(CaError::Incomplete(dir.to_owned())),
    }
}

/// A certificate the CA issued.
#[derive(Debug, Clone)]
pub struct IssuedCertificate {
    pub pem: String,
    /// Lower-case hex of the serial number's bytes.
    pub serial: String,
    pub not_after: DateTime<Utc>,
}

/// The link CA.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .finish_non_exhaustive()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_owned(),
        source,
    }
}

fn time(t: DateTime<Utc>) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(t.timestamp())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A random positive serial of 16 bytes whose DER form needs no padding, so
/// its hex is the same whichever side reads it.
fn random_serial() -> (SerialNumber, String) {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    (SerialNumber::from_slice(&bytes), hex::encode(bytes))
}

impl CertificateAuthority {
    /// Loads the CA from `dir`, creating it there on first start.
    pub fn load_or_create(dir: &Path) -> Result<Self, CaError> {
        let key_path = dir.join("ca.key");
        let cert_path = dir.join("ca.crt");
        match (key_path.exists(), cert_path.exists()) {
            (true, true) => {
                let key_pem = std::fs::read_to_string(&key_path).map_err(io(&key_path))?;
                let cert_pem = std::fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
                Self::from_pem(&cert_pem, &key_pem).map_err(|source| CaError::Invalid {
                    path: dir.to_owned(),
                    source,
                })
            }
            (false, false) => {
                std::fs::create_dir_all(dir).map_err(io(dir))?;
                let ca = Self::generate().map_err(CaError::Sign)?;
                write_private(&key_path, &ca.issuer.key().serialize_pem())?;
                std::fs::write(&cert_path, &ca.ca_pem).map_err(io(&cert_path))?;
                tracing::info!(dir = %dir.display(), "link.ca_created");
                Ok(ca)
            }
            _ => Err(CaError::Incomplete(dir.to_owned())),
        }
    }

    /// A new CA valid for ten years.
    pub fn generate() -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "clawfed link CA");
        dn.push(DnType::OrganizationName, "clawfed");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = Utc::now();
        params.not_before = time(now - chrono::Duration::minutes(5));
        params.not_after = time(now + chrono::Duration::days(3650));
        params.serial_number = Some(random_serial().0);
        let cert = params.self_signed(&key)?;
        let ca_pem = cert.pem();
        let ca_der = cert.der().clone();
        Ok(Self {
            issuer: Issuer::new(params, key),
            ca_pem,
            ca_der,
        })
    }

    /// A CA from PEM files an operator supplies.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, rcgen::Error> {
        let key = KeyPair::from_pem(key_pem)?;
        let ca_der = rustls_pki_types::pem::PemObject::from_pem_slice(cert_pem.as_bytes())
            .map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(Self {
            issuer,
            ca_pem: cert_pem.to_owned(),
            ca_der,
        })
    }

    /// The CA certificate (PEM), which spokes pin.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate (DER).
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// A serving certificate for the link port, with DNS names and IPs.
    pub fn issue_server(
        &self,
        names: &[String],
        ttl: Duration,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "clawfed hub link");
        params.distinguished_name = dn;
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n.clone().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let now = Utc::now();
        params.not_before = time(now - chrono::Duration::minutes(5));
        params.not_after = time(now + chrono::Duration::from_std(ttl).unwrap_or_default());
        params.serial_number = Some(random_serial().0);
        let cert = params.signed_by(&key, &self.issuer)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((vec![cert.der().clone(), self.ca_der.clone()], key_der))
    }

    /// Checks a CSR parses and its signature verifies.
    pub fn check_csr(csr_pem: &str) -> Result<(), CaError> {
        CertificateSigningRequestParams::from_pem(csr_pem)
            .map(|_| ())
            .map_err(CaError::BadCsr)
    }

    /// Signs a spoke's CSR as a client certificate for `cluster_id`, valid
    /// for `ttl`. The CSR contributes only its public key.
    pub fn sign_cluster_csr(
        &self,
        csr_pem: &str,
        cluster_id: &str,
        cluster_name: &str,
        ttl: Duration,
    ) -> Result<IssuedCertificate, CaError> {
        let csr = CertificateSigningRequestParams::from_pem(csr_pem).map_err(CaError::BadCsr)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cluster_name);
        dn.push(DnType::OrganizationName, "clawfed spoke");
        params.distinguished_name = dn;
        let uri = clawfed_proto::identity::cluster_uri(cluster_id)
            .try_into()
            .map_err(CaError::Sign)?;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let now = Utc::now();
        let not_after = now + chrono::Duration::from_std(ttl).unwrap_or_default();
        // Small backdating tolerates clock skew between hub and spoke.
        params.not_before = time(now - chrono::Duration::minutes(1));
        params.not_after = time(not_after);
        let (serial_number, serial) = random_serial();
        params.serial_number = Some(serial_number);
        let cert = params
            .signed_by(&csr.public_key, &self.issuer)
            .map_err(CaError::Sign)?;
        Ok(IssuedCertificate {
            pem: cert.pem(),
            serial,
            not_after: DateTime::from_timestamp(not_after.timestamp(), 0).unwrap_or(not_after),
        })
    }
}

fn write_private(path: &Path, contents: &str) -> Result<(), CaError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(io(path))?;
    file.write_all(contents.as_bytes()).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_then_reloads_with_owner_only_key() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::load_or_create(dir.path()).unwrap();
        let again = CertificateAuthority::load_or_create(dir.path()).unwrap();
        assert_eq!(ca.ca_pem(), again.ca_pem());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("ca.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_file(dir.path().join("ca.crt")).unwrap();
        assert!(matches!(
            CertificateAuthority::load_or_create(dir.path()),
            Err(CaError::Incomplete(_))
        ));
    }

    #[test]
    fn signs_only_the_hub_chosen_identity() {
        let ca = CertificateAuthority::generate().unwrap();
        let key = KeyPair::generate().unwrap();
        // The CSR asks for a name of its own choosing; the hub ignores it.
        let csr = CertificateParams::new(vec!["evil.example".to_string()])
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let issued = ca
            .sign_cluster_csr(&csr, "cid-1", "exec-a", Duration::from_secs(3600))
            .unwrap();
        let der = rustls_pki_types::pem::PemObject::from_pem_slice(issued.pem.as_bytes())
            .map(|d: CertificateDer<'static>| d.to_vec())
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let sans: Vec<String> = cert
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| format!("{n}"))
            .collect();
        assert_eq!(sans.len(), 1, "{sans:?}");
        assert!(
            sans[0].contains("spiffe://clawfed/cluster/cid-1"),
            "{sans:?}"
        );
        assert_eq!(hex::encode(cert.raw_serial()), issued.serial);
        assert!(
            ca.sign_cluster_csr("not a csr", "c", "n", Duration::from_secs(1))
                .is_err()
        );
    }
}
