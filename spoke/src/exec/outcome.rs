//! The outcome of one piece of work: [`Done`], or a [`Failure`] (refused,
//! transient or forbidden) and how the errors of the apply room, the
//! namespace resolution, the provider and cleanup map to it.

use clawfed_kube::RequestError;

use crate::apply::{self, namespace::NamespaceError};
use crate::cleanup::StepFailed;

/// A failed piece of work.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) reason: String,
    pub(super) transient: bool,
    /// The apiserver answered 403: final only once it persists (see
    /// [`SpokeConfig::forbidden_retry_window`]).
    pub(super) forbidden: bool,
}

impl From<apply::Error> for Failure {
    fn from(e: apply::Error) -> Self {
        Failure {
            transient: e.is_transient(),
            forbidden: e.is_forbidden(),
            reason: e.to_string(),
        }
    }
}

impl From<RequestError> for Failure {
    fn from(e: RequestError) -> Self {
        apply::Error::from(e).into()
    }
}

impl From<NamespaceError> for Failure {
    fn from(e: NamespaceError) -> Self {
        Failure {
            transient: false,
            forbidden: false,
            reason: e.to_string(),
        }
    }
}

impl From<crate::provider::ProviderError> for Failure {
    fn from(e: crate::provider::ProviderError) -> Self {
        Failure {
            transient: e.is_transient(),
            forbidden: e.is_forbidden(),
            reason: e.to_string(),
        }
    }
}

impl From<StepFailed> for Failure {
    fn from(e: StepFailed) -> Self {
        Failure {
            transient: e.transient,
            forbidden: e.forbidden,
            reason: e.to_string(),
        }
    }
}

pub(super) fn refuse(reason: impl Into<String>) -> Failure {
    Failure {
        reason: reason.into(),
        transient: false,
        forbidden: false,
    }
}

/// A successful piece of work.
#[derive(Debug, Default)]
pub(super) struct Done {
    pub(super) reason: String,
    pub(super) namespace: String,
}
