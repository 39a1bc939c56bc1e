//! What an execution cluster needs of its workload Pods beyond the work the
//! hub sends: an air-gapped cluster pulls images only from its own mirror,
//! with pull credentials, and reaches the model API only through a proxy
//! that may re-sign TLS with a corporate CA. These are the spoke's own
//! settings (they differ per cluster; the hub never knows them), applied to
//! every Harness Pod and data-plane namespace it manages. Pure: no I/O.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, EnvVar, LocalObjectReference, PodSpec, Secret, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The pull Secret the spoke writes into every data-plane namespace.
pub const PULL_SECRET: &str = "clawfed-image-pull";
/// The ConfigMap holding the CA bundle, in every data-plane namespace.
pub const CA_BUNDLE: &str = "clawfed-ca-bundle";
/// Its key.
pub const CA_BUNDLE_KEY: &str = "ca.crt";
/// Where Harness containers find it.
pub const CA_BUNDLE_DIR: &str = "/etc/clawfed/ca-bundle";
/// Addresses never sent to the proxy: the cluster's own.
pub const CLUSTER_NO_PROXY: &str = "localhost,127.0.0.1,.svc,.cluster.local";

pub use clawfed_proto::registry::RegistryMirror;

/// The proxy workloads reach the outside (the model API) through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadProxy {
    /// `http://host:port`.
    pub url: String,
    /// Extra `NO_PROXY` entries, beside [`CLUSTER_NO_PROXY`].
    pub no_proxy: Vec<String>,
}

impl WorkloadProxy {
    /// `url` must be `http(s)://host[:port]` without credentials (they would
    /// be readable in every Harness Pod's spec).
    pub fn parse(url: &str, no_proxy: Vec<String>) -> Result<Self, String> {
        match scheme_and_authority(url) {
            Some((_, authority)) if authority.contains('@') => Err(
                "no credentials in the URL (they would be readable in every Harness Pod's spec)"
                    .into(),
            ),
            Some((_, authority)) if !authority.is_empty() => Ok(WorkloadProxy {
                url: url.to_owned(),
                no_proxy,
            }),
            _ => Err(format!("{url:?}: must be http(s)://host:port")),
        }
    }
}

/// `(scheme, host[:port])` of an `http(s)://` URL.
fn scheme_and_authority(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    matches!(scheme, "http" | "https").then(|| (scheme, rest.split('/').next().unwrap_or_default()))
}

/// The execution cluster's requirements of workload Pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterEnvironment {
    /// Image registries rewritten to the cluster's mirror (first match).
    pub registry_mirrors: Vec<RegistryMirror>,
    /// A `.dockerconfigjson` document: written as [`PULL_SECRET`] and named
    /// in every Harness Pod's `imagePullSecrets`.
    pub pull_credentials: Option<String>,
    /// `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` of Harness containers.
    pub proxy: Option<WorkloadProxy>,
    /// PEM certificates the runtimes trust besides the system's (a
    /// corporate proxy's CA): [`CA_BUNDLE`], mounted read-only.
    pub ca_bundle: Option<String>,
}

impl ClusterEnvironment {
    /// `image` as this cluster pulls it: the first mirror whose `from` is
    /// its registry (or a path prefix of it) replaces that part; the rest,
    /// tag or digest included, is kept.
    pub fn image(&self, image: &str) -> String {
        clawfed_proto::registry::mirrored(&self.registry_mirrors, image)
    }

    /// Adds what the cluster requires to a Harness Pod built from the work:
    /// images from its mirror, pull credentials, proxy, CA bundle.
    pub fn decorate(&self, pod: &mut PodSpec) {
        for c in pod
            .containers
            .iter_mut()
            .chain(pod.init_containers.iter_mut().flatten())
        {
            if let Some(image) = c.image.as_mut() {
                *image = self.image(image);
            }
        }
        if self.pull_credentials.is_some() {
            pod.image_pull_secrets = Some(vec![LocalObjectReference {
                name: PULL_SECRET.into(),
            }]);
        }
        let mut env = Vec::new();
        if let Some(p) = &self.proxy {
            let no_proxy = std::iter::once(CLUSTER_NO_PROXY.to_owned())
                .chain(p.no_proxy.iter().cloned())
                .collect::<Vec<_>>()
                .join(",");
            for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
                env.push(var(name, &p.url));
            }
            env.push(var("NO_PROXY", &no_proxy));
            env.push(var("no_proxy", &no_proxy));
            // Node's fetch (the OpenClaw runtime) honours the variables
            // only when asked to.
            env.push(var("NODE_USE_ENV_PROXY", "1"));
        }
        if self.ca_bundle.is_some() {
            let file = format!("{CA_BUNDLE_DIR}/{CA_BUNDLE_KEY}");
            env.push(var("NODE_EXTRA_CA_CERTS", &file));
            env.push(var("SSL_CERT_FILE", &file));
            pod.volumes.get_or_insert_with(Vec::new).push(Volume {
                name: "ca-bundle".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: CA_BUNDLE.into(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        for c in &mut pod.containers {
            if !env.is_empty() {
                c.env
                    .get_or_insert_with(Vec::new)
                    .extend(env.iter().cloned());
            }
            if self.ca_bundle.is_some() {
                c.volume_mounts
                    .get_or_insert_with(Vec::new)
                    .push(VolumeMount {
                        name: "ca-bundle".into(),
                        mount_path: CA_BUNDLE_DIR.into(),
                        read_only: Some(true),
                        ..Default::default()
                    });
            }
        }
    }

    /// The proxy's address when its URL names an IP literal: the Harness
    /// NetworkPolicy lets Harness Pods reach it (a host name cannot be a
    /// NetworkPolicy peer; then the installation's egress rules must).
    pub fn proxy_endpoint(&self) -> Option<(std::net::IpAddr, u16)> {
        let (scheme, authority) = scheme_and_authority(&self.proxy.as_ref()?.url)?;
        let default_port = if scheme == "https" { 443 } else { 80 };
        if let Ok(sock) = authority.parse::<std::net::SocketAddr>() {
            return Some((sock.ip(), sock.port()));
        }
        let host = authority.trim_start_matches('[').trim_end_matches(']');
        host.parse::<std::net::IpAddr>()
            .ok()
            .map(|ip| (ip, default_port))
    }

    /// The objects every data-plane namespace gets for it.
    pub fn namespace_objects(
        &self,
        namespace: &str,
        labels: BTreeMap<String, String>,
    ) -> (Option<Secret>, Option<ConfigMap>) {
        let meta = |name: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels.clone()),
            ..Default::default()
        };
        let secret = self.pull_credentials.as_ref().map(|c| Secret {
            metadata: meta(PULL_SECRET),
            type_: Some("kubernetes.io/dockerconfigjson".into()),
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".to_string(),
                ByteString(c.as_bytes().to_vec()),
            )])),
            ..Default::default()
        });
        let bundle = self.ca_bundle.as_ref().map(|pem| ConfigMap {
            metadata: meta(CA_BUNDLE),
            data: Some(BTreeMap::from([(CA_BUNDLE_KEY.to_string(), pem.clone())])),
            ..Default::default()
        });
        (secret, bundle)
    }
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_url_is_http_without_credentials_and_an_ip_gets_its_endpoint() {
        let p = WorkloadProxy::parse("http://198.18.9.9:3128", vec![]).unwrap();
        let e = ClusterEnvironment {
            proxy: Some(p),
            ..Default::default()
        };
        assert_eq!(
            e.proxy_endpoint(),
            Some(("198.18.9.9".parse().unwrap(), 3128))
        );
        let named = ClusterEnvironment {
            proxy: Some(WorkloadProxy::parse("https://proxy.corp", vec![]).unwrap()),
            ..Default::default()
        };
        assert_eq!(
            named.proxy_endpoint(),
            None,
            "a host name is no NetworkPolicy peer"
        );
        for bad in [
            "http://u:p@198.18.9.9:3128",
            "socks5://198.18.9.9:1080",
            "198.18.9.9:3128",
            "http://",
        ] {
            assert!(WorkloadProxy::parse(bad, vec![]).is_err(), "{bad}");
        }
    }

    #[test]
    fn pods_get_pull_credentials_proxy_and_ca_bundle() {
        let e = ClusterEnvironment {
            pull_credentials: Some("{\"auths\":{}}".into()),
            proxy: Some(WorkloadProxy {
                url: "http://198.18.9.9:3128".into(),
                no_proxy: vec!["models.internal".into()],
            }),
            ca_bundle: Some("-----BEGIN CERTIFICATE-----\n".into()),
            registry_mirrors: vec!["registry.example=mirror.internal:5000".parse().unwrap()],
        };
        let mut pod = PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                image: Some("registry.example/openclaw@sha256:ab".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        e.decorate(&mut pod);
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("mirror.internal:5000/openclaw@sha256:ab"),
            "from the mirror, digest kept"
        );
        assert_eq!(
            pod.image_pull_secrets.unwrap()[0].name,
            PULL_SECRET.to_string()
        );
        let env: BTreeMap<String, String> = pod.containers[0]
            .env
            .iter()
            .flatten()
            .map(|v| (v.name.clone(), v.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(env["HTTPS_PROXY"], "http://198.18.9.9:3128");
        assert_eq!(
            env["NO_PROXY"],
            format!("{CLUSTER_NO_PROXY},models.internal")
        );
        assert_eq!(env["NODE_USE_ENV_PROXY"], "1");
        assert_eq!(env["NODE_EXTRA_CA_CERTS"], "/etc/clawfed/ca-bundle/ca.crt");
        let mount = &pod.containers[0].volume_mounts.as_ref().unwrap()[0];
        assert_eq!(
            (mount.mount_path.as_str(), mount.read_only),
            (CA_BUNDLE_DIR, Some(true))
        );
        let (secret, bundle) = e.namespace_objects("oce-x", BTreeMap::new());
        assert_eq!(
            secret.unwrap().type_.as_deref(),
            Some("kubernetes.io/dockerconfigjson")
        );
        assert!(bundle.unwrap().data.unwrap().contains_key(CA_BUNDLE_KEY));
        // Nothing configured: nothing added.
        let plain = PodSpec {
            containers: vec![Default::default()],
            ..Default::default()
        };
        let mut same = plain.clone();
        ClusterEnvironment::default().decorate(&mut same);
        assert_eq!(same, plain);
    }
}
