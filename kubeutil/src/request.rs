//! The one "a Kubernetes request failed" error: what was attempted on which
//! object, and the kube client's error. The object helpers ([`object`]),
//! the hub's Gateway room and the spoke's apply room wrap it in their own
//! error enums (`Kube(#[from] RequestError)`), so the message and the
//! classification are written once.
//!
//! [`object`]: crate::object

use crate::classify;

/// A request to the apiserver was refused or failed.
///
/// Displays as `{action} {kind} {namespace}/{name}: {source}`, e.g.
/// `delete Secret ns/s: <the apiserver's answer>`.
#[derive(Debug, thiserror::Error)]
#[error("{action} {kind} {namespace}/{name}: {source}")]
pub struct RequestError {
    /// What was attempted (`apply`, `create`, `delete`, `get`, `list`, ...).
    pub action: &'static str,
    /// Object kind.
    pub kind: &'static str,
    /// Namespace ("" for cluster-scoped objects).
    pub namespace: String,
    /// Object name ("" for lists).
    pub name: String,
    /// The cause.
    #[source]
    pub source: Box<kube::Error>,
}

impl RequestError {
    /// `action` on the `kind` object `namespace`/`name` failed with `source`.
    pub fn new(
        action: &'static str,
        kind: &'static str,
        namespace: &str,
        name: &str,
        source: kube::Error,
    ) -> Self {
        RequestError {
            action,
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            source: Box::new(source),
        }
    }

    /// True when the apiserver answered 403 Forbidden
    /// ([`classify::is_forbidden`]).
    pub fn is_forbidden(&self) -> bool {
        classify::is_forbidden(&self.source)
    }

    /// True when the apiserver answered 404 Not Found
    /// ([`classify::is_not_found`]).
    pub fn is_not_found(&self) -> bool {
        classify::is_not_found(&self.source)
    }

    /// True when retrying the same request later may succeed
    /// ([`classify::is_transient`]).
    pub fn is_transient(&self) -> bool {
        classify::is_transient(&self.source)
    }

    /// The HTTP status the apiserver answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self.source.as_ref() {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("denied", "Reason").with_code(code).boxed())
    }

    #[test]
    fn displays_the_request_and_its_cause() {
        let source = api(403);
        let cause = source.to_string();
        let e = RequestError::new("delete", "Secret", "ns", "s", source);
        assert_eq!(e.to_string(), format!("delete Secret ns/s: {cause}"));
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), cause);
        // Cluster-scoped lists keep the empty namespace and name.
        let list = RequestError::new("list", "Namespace", "", "", api(500));
        assert!(list.to_string().starts_with("list Namespace /: "), "{list}");
    }

    #[test]
    fn classifies_by_its_cause() {
        let forbidden = RequestError::new("get", "Pod", "ns", "p", api(403));
        assert!(forbidden.is_forbidden());
        assert!(!forbidden.is_not_found());
        assert!(!forbidden.is_transient());
        assert_eq!(forbidden.code(), Some(403));

        let missing = RequestError::new("get", "Pod", "ns", "p", api(404));
        assert!(missing.is_not_found());
        assert!(!missing.is_forbidden());
        assert_eq!(missing.code(), Some(404));

        let throttled = RequestError::new("apply", "Pod", "ns", "p", api(429));
        assert!(throttled.is_transient());

        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let unanswered = RequestError::new("get", "Pod", "ns", "p", kube::Error::ReadEvents(io));
        assert!(unanswered.is_transient());
        assert_eq!(unanswered.code(), None);
    }
}
