//! A dynamic provisioner for the test clusters' class-less claims, as a
//! cloud's default StorageClass would be: every claim that names no
//! StorageClass and that no PersistentVolume is bound (or pre-bound) to gets
//! a `hostPath` volume of its own under the runner's volume dir, reclaimed
//! (directory and PersistentVolume deleted) when its claim goes.
//!
//! The test clusters run only a kube-apiserver and kube-controller-manager:
//! without this, a claim the spoke makes stays Pending and its Pod is never
//! scheduled, so tests had to pre-bind a volume to every claim by name. A
//! claim a test does pre-bind keeps its volume: the provisioner skips any
//! claim a PersistentVolume's `claimRef` already names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

/// The `pv.kubernetes.io/provisioned-by` value of the volumes it makes: the
/// PV controller leaves their reclaim to it.
pub const PROVISIONER: &str = "clawfed.test/hostpath";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// The volume provisioned for a claim: named after the claim's uid, so a
/// claim made again under the same name gets a fresh one.
pub fn volume_name(claim_uid: &str) -> String {
    format!("clawfed-pv-{claim_uid}")
}

/// Whether `claim` is the provisioner's to serve: live, unbound, naming no
/// StorageClass, and named by no PersistentVolume's `claimRef` in `volumes`.
pub fn wants_volume<'a>(
    claim: &PersistentVolumeClaim,
    mut volumes: impl Iterator<Item = &'a PersistentVolume>,
) -> bool {
    let spec = claim.spec.as_ref();
    let class_less = spec
        .and_then(|s| s.storage_class_name.as_deref())
        .is_none_or(str::is_empty);
    let unbound = spec
        .and_then(|s| s.volume_name.as_deref())
        .is_none_or(str::is_empty);
    let (ns, name) = (claim.namespace(), claim.name_any());
    let named = volumes.any(|pv| {
        pv.spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_some_and(|r| r.namespace == ns && r.name.as_deref() == Some(name.as_str()))
    });
    claim.metadata.deletion_timestamp.is_none() && class_less && unbound && !named
}

/// The hostPath volume for `claim`, under `dir`.
pub fn volume_for(claim: &PersistentVolumeClaim, dir: &Path) -> PersistentVolume {
    let uid = claim.uid().unwrap_or_default();
    let name = volume_name(&uid);
    let spec = claim.spec.clone().unwrap_or_default();
    let size = spec
        .resources
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").cloned());
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.to_string(),
                PROVISIONER.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: size.map(|s| BTreeMap::from([("storage".to_string(), s)])),
            access_modes: spec.access_modes,
            storage_class_name: Some(String::new()),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            host_path: Some(HostPathVolumeSource {
                path: dir.join(&name).to_string_lossy().into_owned(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: claim.namespace(),
                name: Some(claim.name_any()),
                uid: Some(uid),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether `pv` is one of ours whose claim is gone.
fn released(pv: &PersistentVolume) -> bool {
    pv.annotations().get(PROVISIONED_BY).map(String::as_str) == Some(PROVISIONER)
        && pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")
        && pv.metadata.deletion_timestamp.is_none()
}

/// Serves claims and reclaims volumes until `shutdown`.
pub async fn run(client: Client, dir: PathBuf, shutdown: CancellationToken) {
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::error!(dir = %dir.display(), error = %e, "provisioner: no volume dir; not provisioning");
        return;
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::all(client);
    let (store, writer) = reflector::store();
    let mut volumes = watcher::watcher(pvs.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .boxed();
    // Claims are served only once the volumes are known (a pre-bound
    // volume must be seen before its claim is judged unserved); the volume
    // watch is what fills the store, so it is driven meanwhile.
    let ready = store.wait_until_ready();
    tokio::pin!(ready);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = &mut ready => if r.is_ok() { break } else { return },
            Some(pv) = volumes.next() => on_volume(&pvs, &dir, pv).await,
        }
    }
    let mut pending = watcher::watcher(claims, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    tracing::info!(dir = %dir.display(), "provisioner.watching");
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            Some(pv) = volumes.next() => on_volume(&pvs, &dir, pv).await,
            Some(claim) = pending.next() => match claim {
                Ok(claim) => provision(&pvs, &store, &dir, &claim).await,
                Err(e) => tracing::warn!(error = %e, "provisioner: claim watch failed; retrying"),
            },
        }
    }
}

async fn on_volume(
    pvs: &Api<PersistentVolume>,
    dir: &Path,
    event: Result<PersistentVolume, watcher::Error>,
) {
    match event {
        Ok(pv) if released(&pv) => reclaim(pvs, dir, &pv).await,
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "provisioner: volume watch failed; retrying"),
    }
}

async fn provision(
    pvs: &Api<PersistentVolume>,
    store: &Store<PersistentVolume>,
    dir: &Path,
    claim: &PersistentVolumeClaim,
) {
    let known = store.state();
    if !wants_volume(claim, known.iter().map(|pv| pv.as_ref())) {
        return;
    }
    let pv = volume_for(claim, dir);
    let name = pv.name_any();
    match pvs.create(&PostParams::default(), &pv).await {
        Ok(_) => {
            tracing::info!(claim = %format!("{}/{}", claim.namespace().unwrap_or_default(), claim.name_any()), volume = %name, "provisioner.provisioned");
        }
        Err(kube::Error::Api(r)) if r.code == 409 => {}
        Err(e) => tracing::warn!(volume = %name, error = %e, "provisioner: create failed"),
    }
}

async fn reclaim(pvs: &Api<PersistentVolume>, dir: &Path, pv: &PersistentVolume) {
    let name = pv.name_any();
    // Only a directory of ours, directly under the volume dir.
    let path = dir.join(&name);
    if let Err(e) = std::fs::remove_dir_all(&path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "provisioner: volume dir not removed");
        return;
    }
    match pvs.delete(&name, &DeleteParams::background()).await {
        Ok(_) => tracing::info!(volume = %name, "provisioner.reclaimed"),
        Err(kube::Error::Api(r)) if r.code == 404 => {}
        Err(e) => tracing::warn!(volume = %name, error = %e, "provisioner: delete failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn claim(class: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("bot-workspace".into()),
                namespace: Some("oce-1".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: class.map(str::to_owned),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_class_less_unbound_claim_gets_a_volume_bound_to_its_uid() {
        let c = claim(None);
        assert!(wants_volume(&c, std::iter::empty()));
        let pv = volume_for(&c, Path::new("/v"));
        let spec = pv.spec.as_ref().expect("spec");
        let r = spec.claim_ref.as_ref().expect("claimRef");
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("oce-1"), Some("bot-workspace"), Some("u-1"))
        );
        assert_eq!(
            spec.host_path.as_ref().map(|h| h.path.as_str()),
            Some("/v/clawfed-pv-u-1")
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some(""));
        assert_eq!(
            spec.capacity.as_ref().and_then(|c| c.get("storage")),
            Some(&Quantity("1Gi".into()))
        );
        // Served once: its volume now names it.
        assert!(!wants_volume(&c, [&pv].into_iter()));
    }

    #[test]
    fn a_pre_bound_classed_or_bound_claim_is_left_alone() {
        let c = claim(None);
        let mut pre_bound = volume_for(&c, Path::new("/v"));
        if let Some(r) = pre_bound.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
            r.uid = None;
        }
        assert!(!wants_volume(&c, [&pre_bound].into_iter()));
        assert!(!wants_volume(&claim(Some("fast")), std::iter::empty()));
        let mut bound = claim(None);
        if let Some(s) = bound.spec.as_mut() {
            s.volume_name = Some("elsewhere".into());
        }
        assert!(!wants_volume(&bound, std::iter::empty()));
    }
}
