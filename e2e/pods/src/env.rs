//! The stand-in's environment and files, as a kubelet would give them: the
//! container's `env` and `envFrom`, and its Secret and ConfigMap volumes.
//!
//! The Secrets and ConfigMaps a Pod refers to are read through the API once
//! per start ([`fetch`]); building the env and the files from them is pure
//! ([`container_env`], [`volume_files`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, Pod, Secret};
use kube::{Api, Client};

/// Errors of this module. Each names the Pod field that referred to what is
/// missing or wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A referenced Secret or ConfigMap does not exist (and is not optional).
    #[error("{field}: {kind} {name:?} not found")]
    MissingObject {
        field: String,
        kind: &'static str,
        name: String,
    },
    /// A referenced key is absent (and the reference is not optional).
    #[error("{field}: {kind} {name:?} has no key {key:?}")]
    MissingKey {
        field: String,
        kind: &'static str,
        name: String,
        key: String,
    },
    /// An env value that is not UTF-8 text.
    #[error("{field}: the value of key {key:?} is not UTF-8")]
    NotUtf8 { field: String, key: String },
    /// A fieldRef path the runner does not provide.
    #[error("{field}: fieldRef {path:?} is not supported")]
    UnsupportedFieldRef { field: String, path: String },
    /// A valueFrom the runner does not provide (resourceFieldRef, ...).
    #[error("{field}: only secretKeyRef, configMapKeyRef and fieldRef are supported")]
    UnsupportedValueFrom { field: String },
    /// A mount or item path that would leave the Pod's root.
    #[error("{field}: path {path:?} must stay inside the container root (no '..')")]
    BadPath { field: String, path: String },
    /// Reading a Secret or ConfigMap failed.
    #[error("reading {kind} {namespace}/{name}")]
    Fetch {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Key -> bytes of each referenced object; `None` when it does not exist.
#[derive(Debug, Default)]
pub struct Sources {
    pub secrets: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Secret,
    ConfigMap,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        }
    }
}

impl Sources {
    fn object(&self, kind: Kind, name: &str) -> Option<&BTreeMap<String, Vec<u8>>> {
        let map = match kind {
            Kind::Secret => &self.secrets,
            Kind::ConfigMap => &self.config_maps,
        };
        map.get(name).and_then(Option::as_ref)
    }
}

fn container(pod: &Pod) -> Option<&Container> {
    pod.spec.as_ref().and_then(|s| s.containers.first())
}

/// The Secrets and ConfigMaps the first container refers to (env, envFrom,
/// mounted volumes).
pub fn references(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut secrets = BTreeSet::new();
    let mut config_maps = BTreeSet::new();
    let Some(c) = container(pod) else {
        return (secrets, config_maps);
    };
    for from in c.env_from.iter().flatten() {
        if let Some(s) = &from.secret_ref {
            secrets.insert(s.name.clone());
        }
        if let Some(m) = &from.config_map_ref {
            config_maps.insert(m.name.clone());
        }
    }
    for var in c.env.iter().flatten() {
        let Some(v) = &var.value_from else { continue };
        if let Some(s) = &v.secret_key_ref {
            secrets.insert(s.name.clone());
        }
        if let Some(m) = &v.config_map_key_ref {
            config_maps.insert(m.name.clone());
        }
    }
    for (_, volume) in mounted_volumes(pod) {
        if let Some(s) = volume.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.insert(s);
        }
        if let Some(m) = &volume.config_map {
            config_maps.insert(m.name.clone());
        }
    }
    (secrets, config_maps)
}

/// Reads what [`references`] names through the API.
pub async fn fetch(client: &Client, pod: &Pod) -> Result<Sources> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let (secret_names, config_map_names) = references(pod);
    let secrets = fetch_each(client, &namespace, secret_names, "Secret", |s: Secret| {
        s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    })
    .await?;
    let config_maps = fetch_each(
        client,
        &namespace,
        config_map_names,
        "ConfigMap",
        |m: ConfigMap| {
            let mut all: BTreeMap<String, Vec<u8>> = m
                .binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            all.extend(
                m.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes())),
            );
            all
        },
    )
    .await?;
    Ok(Sources {
        secrets,
        config_maps,
    })
}

/// Reads each of `names` (objects of `kind`) in `namespace`: its data as
/// `data` gives it, `None` when it does not exist.
async fn fetch_each<K>(
    client: &Client,
    namespace: &str,
    names: BTreeSet<String>,
    kind: &'static str,
    data: impl Fn(K) -> BTreeMap<String, Vec<u8>>,
) -> Result<BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let mut all = BTreeMap::new();
    for name in names {
        let found = api.get_opt(&name).await.map_err(|source| Error::Fetch {
            kind,
            namespace: namespace.to_owned(),
            name: name.clone(),
            source: Box::new(source),
        })?;
        all.insert(name, found.map(&data));
    }
    Ok(all)
}

fn text(field: &str, key: &str, bytes: &[u8]) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::NotUtf8 {
        field: field.to_string(),
        key: key.to_string(),
    })
}

/// A key as a kubelet would accept it as an env var name.
fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

fn key_value<'a>(
    sources: &'a Sources,
    field: &str,
    kind: Kind,
    name: &str,
    key: &str,
    optional: bool,
) -> Result<Option<&'a [u8]>> {
    let Some(object) = sources.object(kind, name) else {
        if optional {
            return Ok(None);
        }
        return Err(Error::MissingObject {
            field: field.to_string(),
            kind: kind.name(),
            name: name.to_string(),
        });
    };
    match object.get(key) {
        Some(v) => Ok(Some(v)),
        None if optional => Ok(None),
        None => Err(Error::MissingKey {
            field: field.to_string(),
            kind: kind.name(),
            name: name.to_string(),
            key: key.to_string(),
        }),
    }
}

fn field_ref(pod: &Pod, pod_ip: &str, field: &str, path: &str) -> Result<String> {
    let meta = &pod.metadata;
    let label = |map: &Option<BTreeMap<String, String>>, prefix: &str| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
    };
    let value = match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "status.podIP" => Some(pod_ip.to_string()),
        "status.hostIP" => Some(crate::status::HOST_IP.to_string()),
        "spec.nodeName" => pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone()),
        _ => label(&meta.labels, "metadata.labels['")
            .or_else(|| label(&meta.annotations, "metadata.annotations['")),
    };
    value.ok_or_else(|| Error::UnsupportedFieldRef {
        field: field.to_string(),
        path: path.to_string(),
    })
}

/// The container's env, in the kubelet's order: `envFrom` first (later
/// sources win), then `env` (later entries win).
pub fn container_env(pod: &Pod, pod_ip: &str, sources: &Sources) -> Result<Vec<(String, String)>> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(old, _)| *old != k);
        env.push((k, v));
    };
    let Some(c) = container(pod) else {
        return Ok(env);
    };
    for (i, from) in c.env_from.iter().flatten().enumerate() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, optional) = match (&from.secret_ref, &from.config_map_ref) {
            (Some(s), _) => (Kind::Secret, &s.name, s.optional.unwrap_or(false)),
            (None, Some(m)) => (Kind::ConfigMap, &m.name, m.optional.unwrap_or(false)),
            (None, None) => continue,
        };
        let field = format!("spec.containers[0].envFrom[{i}]");
        let Some(object) = sources.object(kind, name) else {
            if optional {
                continue;
            }
            return Err(Error::MissingObject {
                field,
                kind: kind.name(),
                name: name.clone(),
            });
        };
        for (key, value) in object {
            let var = format!("{prefix}{key}");
            if valid_env_name(&var) {
                let value = text(&field, key, value)?;
                set(&mut env, var, value);
            }
        }
    }
    for (i, var) in c.env.iter().flatten().enumerate() {
        let field = format!("spec.containers[0].env[{i}]");
        let Some(from) = &var.value_from else {
            set(
                &mut env,
                var.name.clone(),
                var.value.clone().unwrap_or_default(),
            );
            continue;
        };
        let value = if let Some(r) = &from.secret_key_ref {
            let field = format!("{field}.valueFrom.secretKeyRef");
            let optional = r.optional.unwrap_or(false);
            key_value(sources, &field, Kind::Secret, &r.name, &r.key, optional)?
                .map(|v| text(&field, &r.key, v))
                .transpose()?
        } else if let Some(r) = &from.config_map_key_ref {
            let field = format!("{field}.valueFrom.configMapKeyRef");
            let optional = r.optional.unwrap_or(false);
            key_value(sources, &field, Kind::ConfigMap, &r.name, &r.key, optional)?
                .map(|v| text(&field, &r.key, v))
                .transpose()?
        } else if let Some(r) = &from.field_ref {
            let field = format!("{field}.valueFrom.fieldRef.fieldPath");
            Some(field_ref(pod, pod_ip, &field, &r.field_path)?)
        } else {
            return Err(Error::UnsupportedValueFrom { field });
        };
        // An optional reference that resolves to nothing sets no variable.
        if let Some(value) = value {
            set(&mut env, var.name.clone(), value);
        }
    }
    Ok(env)
}

/// A relative path made of normal components only.
fn safe_relative(field: &str, path: &str) -> Result<PathBuf> {
    let p = Path::new(path.trim_start_matches('/'));
    if path.is_empty() || p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Error::BadPath {
            field: field.to_string(),
            path: path.to_string(),
        });
    }
    Ok(p.to_path_buf())
}

fn mounted_volumes(pod: &Pod) -> Vec<(usize, &k8s_openapi::api::core::v1::Volume)> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let Some(c) = spec.containers.first() else {
        return Vec::new();
    };
    c.volume_mounts
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, m)| {
            spec.volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
                .map(|v| (i, v))
        })
        .collect()
}

/// The files of the first container's Secret and ConfigMap volumes, as
/// paths relative to the container root: `<mountPath>/<key or item path>`.
/// Other volume kinds are not materialised.
pub fn volume_files(pod: &Pod, sources: &Sources) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut files = Vec::new();
    let Some(c) = container(pod) else {
        return Ok(files);
    };
    let mounts: Vec<_> = c.volume_mounts.iter().flatten().collect();
    for (i, volume) in mounted_volumes(pod) {
        let mount_field = format!("spec.containers[0].volumeMounts[{i}].mountPath");
        let (kind, name, items, optional) = if let Some(s) = &volume.secret {
            let Some(name) = &s.secret_name else { continue };
            (Kind::Secret, name, &s.items, s.optional.unwrap_or(false))
        } else if let Some(m) = &volume.config_map {
            (
                Kind::ConfigMap,
                &m.name,
                &m.items,
                m.optional.unwrap_or(false),
            )
        } else {
            continue;
        };
        let dir = safe_relative(&mount_field, &mounts[i].mount_path)?;
        let volume_field = format!("spec.volumes[name={}]", volume.name);
        let Some(object) = sources.object(kind, name) else {
            if optional {
                continue;
            }
            return Err(Error::MissingObject {
                field: volume_field,
                kind: kind.name(),
                name: name.clone(),
            });
        };
        let selected: Vec<KeyToPath> = match items {
            Some(items) if !items.is_empty() => items.clone(),
            _ => object
                .keys()
                .map(|k| KeyToPath {
                    key: k.clone(),
                    path: k.clone(),
                    ..Default::default()
                })
                .collect(),
        };
        for item in selected {
            let Some(value) = object.get(&item.key) else {
                if optional {
                    continue;
                }
                return Err(Error::MissingKey {
                    field: format!("{volume_field}.items"),
                    kind: kind.name(),
                    name: name.clone(),
                    key: item.key,
                });
            };
            let rel = safe_relative(&format!("{volume_field}.items.path"), &item.path)?;
            files.push((dir.join(rel), value.clone()));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "h-1", "namespace": "ns", "uid": "u-1",
                         "labels": {"clawfed.io/agent": "a1"}},
            "spec": spec
        }))
        .unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Vec<u8>>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn sources() -> Sources {
        let mut s = Sources::default();
        s.secrets.insert(
            "model".into(),
            map(&[
                ("API_KEY", "sk-1"),
                ("SHARED", "from-secret"),
                ("bad key", "x"),
            ]),
        );
        s.secrets.insert("gone".into(), None);
        s.config_maps.insert(
            "conf".into(),
            map(&[("MODE", "fast"), ("SHARED", "from-cm")]),
        );
        s
    }

    #[test]
    fn env_follows_kubelet_order_and_references() {
        let p = pod(json!({"containers": [{
        "name": "c", "image": "clawfed.test/harness-standin:test",
        "envFrom": [{"secretRef": {"name": "model"}},
                    {"configMapRef": {"name": "conf"}, "prefix": "CM_"},
                    {"secretRef": {"name": "gone", "optional": true}}],
        "env": [
            {"name": "PLAIN", "value": "v"},
            {"name": "SHARED", "value": "from-env"},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "model", "key": "API_KEY"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "MODE"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}},
            {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "AGENT", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['clawfed.io/agent']"}}}
        ]}]}));
        let (secrets, cms) = references(&p);
        assert_eq!(secrets, BTreeSet::from(["gone".into(), "model".into()]));
        assert_eq!(cms, BTreeSet::from(["conf".into()]));
        let env: BTreeMap<_, _> = container_env(&p, "198.18.176.5", &sources())
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env["API_KEY"], "sk-1");
        assert_eq!(env["CM_MODE"], "fast");
        assert_eq!(env["SHARED"], "from-env", "env wins over envFrom");
        assert_eq!(env["KEY"], "sk-1");
        assert_eq!(env["MODE"], "fast");
        assert_eq!(env["ME"], "h-1");
        assert_eq!(env["IP"], "198.18.176.5");
        assert_eq!(env["AGENT"], "a1");
        assert!(!env.contains_key("OPT"));
        assert!(!env.contains_key("bad key"), "invalid names are skipped");
    }

    #[test]
    fn missing_references_name_the_field() {
        let p = pod(json!({"containers": [{"name": "c", "image": "i",
            "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "model", "key": "NOPE"}}}]}]}));
        let e = container_env(&p, "ip", &sources()).unwrap_err().to_string();
        assert_eq!(
            e,
            "spec.containers[0].env[0].valueFrom.secretKeyRef: Secret \"model\" has no key \"NOPE\""
        );
        let p = pod(json!({"containers": [{"name": "c", "image": "i",
            "envFrom": [{"secretRef": {"name": "gone"}}]}]}));
        let e = container_env(&p, "ip", &sources()).unwrap_err().to_string();
        assert_eq!(
            e,
            "spec.containers[0].envFrom[0]: Secret \"gone\" not found"
        );
    }

    #[test]
    fn volumes_become_files_under_their_mount_path() {
        let p = pod(json!({
            "containers": [{"name": "c", "image": "i", "volumeMounts": [
                {"name": "transport", "mountPath": "/var/run/clawfed/transport"},
                {"name": "conf", "mountPath": "/etc/conf"},
                {"name": "scratch", "mountPath": "/tmp"}]}],
            "volumes": [
                {"name": "transport", "secret": {"secretName": "model"}},
                {"name": "conf", "configMap": {"name": "conf", "items": [{"key": "MODE", "path": "sub/mode"}]}},
                {"name": "scratch", "emptyDir": {}}]}));
        let files = volume_files(&p, &sources()).unwrap();
        let paths: Vec<_> = files.iter().map(|(p, _)| p.display().to_string()).collect();
        assert!(paths.contains(&"var/run/clawfed/transport/API_KEY".to_string()));
        assert!(paths.contains(&"etc/conf/sub/mode".to_string()));
        assert_eq!(paths.len(), 4, "{paths:?}");
        let escape = pod(json!({
            "containers": [{"name": "c", "image": "i", "volumeMounts": [
                {"name": "conf", "mountPath": "/etc/conf"}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "conf",
                "items": [{"key": "MODE", "path": "../../x"}]}}]}));
        assert!(matches!(
            volume_files(&escape, &sources()),
            Err(Error::BadPath { .. })
        ));
    }
}
