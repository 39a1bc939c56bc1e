//! A kubeconfig an operator names (the hub's `gateway.kubeconfig`, the
//! spoke's `--kubeconfig`), loaded with one rule both keep: the Kubernetes
//! API's certificate is verified. A kubeconfig with
//! `insecure-skip-tls-verify` is refused, naming the field, rather than
//! trusted: whoever sits between clawfed and the apiserver would otherwise
//! receive its credentials.

use std::path::{Path, PathBuf};

/// Why the kubeconfig cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The file cannot be read or parsed.
    #[error("{setting} {}: {source}", path.display())]
    Read {
        setting: &'static str,
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Its cluster skips the apiserver's certificate check.
    #[error(
        "{setting} {}: insecure-skip-tls-verify is set; clawfed always verifies the Kubernetes API's certificate (remove it and give certificate-authority or certificate-authority-data)",
        path.display()
    )]
    InsecureSkipTlsVerify {
        setting: &'static str,
        path: PathBuf,
    },
}

/// The client config of the kubeconfig at `path` (its current context);
/// `setting` names where the path came from, for the error.
pub async fn load(setting: &'static str, path: &Path) -> Result<kube::Config, KubeconfigError> {
    let read = |source| KubeconfigError::Read {
        setting,
        path: path.to_owned(),
        source,
    };
    let file = kube::config::Kubeconfig::read_from(path).map_err(read)?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(read)?;
    if config.accept_invalid_certs {
        return Err(KubeconfigError::InsecureSkipTlsVerify {
            setting,
            path: path.to_owned(),
        });
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(insecure: bool) -> String {
        let tls = if insecure {
            "insecure-skip-tls-verify: true"
        } else {
            "certificate-authority-data: \"\""
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    {tls}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        )
    }

    #[tokio::test]
    async fn a_kubeconfig_that_skips_certificate_checks_is_refused_naming_the_field() {
        let dir = std::env::temp_dir().join(format!("clawfed-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let insecure = dir.join("insecure.yaml");
        std::fs::write(&insecure, kubeconfig(true)).unwrap();
        let e = load("--kubeconfig", &insecure).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("--kubeconfig ") && text.contains("insecure-skip-tls-verify"),
            "{text}"
        );
        let verified = dir.join("verified.yaml");
        std::fs::write(&verified, kubeconfig(false)).unwrap();
        let c = load("--kubeconfig", &verified).await.unwrap();
        assert!(!c.accept_invalid_certs);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
