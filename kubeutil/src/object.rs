//! Deleting objects so that a retry converges: absent counts as deleted,
//! and "gone" means a GET says so (finalizers, foreground deletion and
//! pvc-protection keep an object after the DELETE returned).

use std::fmt::Debug;
use std::time::Duration;

use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::classify::is_not_found;
use crate::request::RequestError;

/// Errors of a delete or a wait.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apiserver refused or failed a request.
    #[error(transparent)]
    Kube(#[from] RequestError),
    /// A deleted object did not go away in time.
    #[error("{kind} {namespace}/{name} still present after {waited:?}")]
    DeleteTimeout {
        /// Object kind.
        kind: &'static str,
        /// Namespace ("" for cluster-scoped).
        namespace: String,
        /// Name.
        name: String,
        /// How long it waited.
        waited: Duration,
    },
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True when the apiserver answered 403 Forbidden.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Kube(e) if e.is_forbidden())
    }

    /// True when retrying later may succeed (see
    /// [`is_transient`](crate::classify::is_transient)); an
    /// object still going away is always worth waiting for again.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube(e) => e.is_transient(),
            Error::DeleteTimeout { .. } => true,
        }
    }
}

/// Deletes `name` (of `kind`, for messages); absent is success. Returns
/// whether it existed.
pub async fn delete_if_present<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    dp: &kube::api::DeleteParams,
) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, dp).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => {
            Err(
                RequestError::new("delete", kind, api.namespace().unwrap_or_default(), name, e)
                    .into(),
            )
        }
    }
}

/// First poll interval of [`wait_gone`]; doubles up to [`MAX_POLL`].
pub const FIRST_POLL: Duration = Duration::from_millis(25);
/// Longest poll interval of [`wait_gone`].
pub const MAX_POLL: Duration = Duration::from_millis(500);

/// Waits until `name` is gone, polling GET (never LIST, which would cost
/// the apiserver a scan) with a growing interval; fails after `timeout`.
/// To stop it early, drop the future (it only reads).
pub async fn wait_gone<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    timeout: Duration,
) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let start = tokio::time::Instant::now();
    let mut interval = FIRST_POLL;
    loop {
        match api.get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => {}
            // get_opt maps NotFound to None; a bare 404 (e.g. a resource
            // type no longer served) is gone all the same.
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => {
                return Err(RequestError::new(
                    "get",
                    kind,
                    api.namespace().unwrap_or_default(),
                    name,
                    e,
                )
                .into());
            }
        }
        if start.elapsed() >= timeout {
            return Err(Error::DeleteTimeout {
                kind,
                namespace: api.namespace().unwrap_or_default().to_string(),
                name: name.to_string(),
                waited: timeout,
            });
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(MAX_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_transient_and_a_refusal_is_not() {
        let timeout = Error::DeleteTimeout {
            kind: "Deployment",
            namespace: "ns".into(),
            name: "d".into(),
            waited: Duration::from_secs(3),
        };
        assert!(timeout.is_transient());
        assert_eq!(
            timeout.to_string(),
            "Deployment ns/d still present after 3s"
        );
        let refused: Error = RequestError::new(
            "delete",
            "Secret",
            "ns",
            "s",
            kube::Error::Api(
                kube::core::Status::failure("no", "Forbidden")
                    .with_code(403)
                    .boxed(),
            ),
        )
        .into();
        assert!(!refused.is_transient());
        assert!(refused.to_string().starts_with("delete Secret ns/s: "));
    }
}
