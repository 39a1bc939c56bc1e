//! Kubernetes objects for namespace and Harness work.
//!
//! Object builders are pure (typed k8s-openapi structs); the thin I/O helpers
//! here apply them server-side with the one field manager
//! [`FIELD_MANAGER`]. Every object carries the ownership labels
//! ([`owner_labels`]) so cleanup and a restarted spoke know exactly what the
//! spoke owns.

pub mod environment;
pub mod harness;
pub mod ledger;
pub mod namespace;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use clawfed_kube::RequestError;
use clawfed_proto::labels;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The one field manager of every write the spoke makes.
pub const FIELD_MANAGER: &str = "clawfed-spoke";

/// Errors of the apply room.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apiserver refused or failed a request.
    #[error(transparent)]
    Kube(#[from] RequestError),
    /// The work spec is not acceptable (fails closed).
    #[error("{0}")]
    Invalid(String),
    /// The data-plane namespace cannot be used (fails closed).
    #[error(transparent)]
    Namespace(#[from] namespace::NamespaceError),
    /// A delete or a wait for an object to go failed (or timed out), as
    /// the shared Kubernetes helpers report it.
    #[error(transparent)]
    Object(#[from] clawfed_kube::object::Error),
    /// The operation was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// An object the work creates only once is still being deleted (an
    /// Agent deleted and made again under its name): retried until it goes.
    #[error("{kind} {namespace}/{name} is still being deleted")]
    Terminating {
        /// Object kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Object name.
        name: String,
    },
}

/// Result alias of the apply room.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True when the apiserver answered 403 Forbidden.
    pub fn is_forbidden(&self) -> bool {
        match self {
            Error::Kube(e) => e.is_forbidden(),
            Error::Object(e) => e.is_forbidden(),
            _ => false,
        }
    }

    /// True when retrying the same work later may succeed (apiserver
    /// unavailable, throttled, conflicts, timeouts); false when the work
    /// itself is refused.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube(e) => e.is_transient(),
            Error::Object(e) => e.is_transient(),
            Error::Cancelled | Error::Terminating { .. } => true,
            Error::Invalid(_) | Error::Namespace(_) => false,
        }
    }
}

pub use clawfed_kube::classify::{is_forbidden, is_not_found};

/// Server-side apply parameters: field manager [`FIELD_MANAGER`], forced (the
/// spoke is the only writer of the fields it owns).
pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Merge-patch parameters with field manager [`FIELD_MANAGER`].
pub fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

/// Labels every object of a tenant carries.
pub fn owner_labels(tenant: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
        (labels::TENANT.to_string(), tenant.to_string()),
    ])
}

/// The annotations recording which work produced an object.
pub fn work_annotations(target: &str, generation: i64) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::WORK_TARGET_ANNOTATION.to_string(),
            target.to_string(),
        ),
        (
            labels::GENERATION_ANNOTATION.to_string(),
            generation.to_string(),
        ),
    ])
}

/// Server-side applies a namespaced object.
pub async fn ssa<K>(api: &Api<K>, obj: &K) -> Result<K>
where
    K: Resource + k8s_openapi::Resource + Serialize + DeserializeOwned + Clone + Debug,
    <K as Resource>::DynamicType: Default,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(&name, &apply_params(), &Patch::Apply(obj))
        .await
        .map_err(|source| {
            let namespace = obj.meta().namespace.as_deref().unwrap_or_default();
            RequestError::new("apply", kind_of::<K>(), namespace, &name, source).into()
        })
}

/// Creates `obj` unless an object of its name exists, which is left as it
/// is (for objects that outlive the work that made them, like the
/// Agent-owned claim). One being deleted is [`Error::Terminating`].
pub async fn create_if_absent<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: Resource + k8s_openapi::Resource + Serialize + DeserializeOwned + Clone + Debug,
    <K as Resource>::DynamicType: Default,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let namespace = obj.meta().namespace.clone().unwrap_or_default();
    let failed =
        |action, source| RequestError::new(action, kind_of::<K>(), &namespace, &name, source);
    let existing = api.get_opt(&name).await.map_err(|e| failed("get", e))?;
    let existing = match existing {
        Some(o) => Some(o),
        None => match api.create(&kube::api::PostParams::default(), obj).await {
            Ok(_) => None,
            // Made meanwhile (another spoke of the cluster): read it again.
            Err(kube::Error::Api(r)) if r.code == 409 => {
                api.get_opt(&name).await.map_err(|e| failed("get", e))?
            }
            Err(e) => return Err(failed("create", e).into()),
        },
    };
    match existing {
        Some(o) if o.meta().deletion_timestamp.is_some() => Err(Error::Terminating {
            kind: kind_of::<K>(),
            namespace,
            name,
        }),
        _ => Ok(()),
    }
}

/// The static kind name of `K` (for error messages).
pub fn kind_of<K: k8s_openapi::Resource>() -> &'static str {
    K::KIND
}

/// A typed, namespaced Kubernetes object: what the delete and wait helpers
/// below take (one bound for both, so they accept the same kinds).
pub trait NamespacedObject:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + k8s_openapi::Resource
    + DeserializeOwned
    + Clone
    + Debug
{
}

impl<K> NamespacedObject for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + DeserializeOwned
        + Clone
        + Debug
{
}

/// Deletes a namespaced object; absent is success. Returns whether it existed.
pub async fn delete_if_present<K>(api: &Api<K>, name: &str, dp: &DeleteParams) -> Result<bool>
where
    K: NamespacedObject,
{
    Ok(clawfed_kube::object::delete_if_present(api, kind_of::<K>(), name, dp).await?)
}

/// Waits until a namespaced object is gone (see
/// [`clawfed_kube::object::wait_gone`]), or `cancel` fires.
pub async fn wait_gone<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<()>
where
    K: NamespacedObject,
{
    tokio::select! {
        () = cancel.cancelled() => Err(Error::Cancelled),
        r = clawfed_kube::object::wait_gone(api, kind_of::<K>(), name, timeout) => Ok(r?),
    }
}

/// Retries `f` while the apiserver answers `Forbidden`, for at most `settle`:
/// right after the spoke binds its tenant role in a new namespace the
/// authorizer may not have seen the binding yet.
pub async fn retry_forbidden<T, F, Fut>(settle: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        match f().await {
            Err(Error::Kube(e)) if e.is_forbidden() && start.elapsed() < settle => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}
