//! Classification of kube client errors: one answer to "is this worth
//! retrying?" for the hub and the spoke.

/// True when retrying the same request later may succeed without anyone
/// changing the request, RBAC or CRDs: the apiserver failed (5xx), throttled
/// (429) or saw a conflicting write (409), or the request never got an
/// answer (connection, TLS, timeout). Refusals (4xx other than 409/429),
/// credential problems, undecodable answers and requests that cannot be
/// built are not.
pub fn is_transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429 || s.code == 409,
        kube::Error::Auth(_) | kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    }
}

/// True when the apiserver answered with HTTP status `code`.
pub fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

/// True for a 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    is_status(err, 404)
}

/// True for a 403.
pub fn is_forbidden(err: &kube::Error) -> bool {
    is_status(err, 403)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("m", "r").with_code(code).boxed())
    }

    #[test]
    fn api_status_classification_table() {
        let table: &[(u16, bool)] = &[
            (400, false), // bad request: the same request fails again
            (401, false),
            (403, false), // RBAC must change first
            (404, false),
            (409, true), // conflict: re-read and retry
            (410, false),
            (422, false), // invalid object
            (429, true),  // throttled
            (500, true),
            (502, true),
            (503, true),
            (504, true),
        ];
        for &(code, transient) in table {
            assert_eq!(is_transient(&api(code)), transient, "HTTP {code}");
        }
    }

    #[test]
    fn non_api_errors() {
        let serde = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(!is_transient(&kube::Error::SerdeError(serde)));
        let build = kube::core::request::Error::Validation("bad".into());
        assert!(!is_transient(&kube::Error::BuildRequest(build)));
        // No answer at all: the connection or the stream broke.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(is_transient(&kube::Error::ReadEvents(io)));
        assert!(is_transient(&kube::Error::Service(
            "connection refused".into()
        )));
    }

    #[test]
    fn status_checks() {
        assert!(is_not_found(&api(404)));
        assert!(!is_not_found(&api(403)));
        assert!(is_forbidden(&api(403)));
        assert!(!is_forbidden(&api(401)));
        assert!(is_status(&api(409), 409));
        let serde = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(!is_not_found(&kube::Error::SerdeError(serde)));
    }
}
