//! Checks of request fields: required, free of NUL, JSON; and proto3's
//! empty values read as absent.

use tonic::Status;

use crate::service::ServiceError;

pub(super) fn invalid(field: &str, reason: impl Into<String>) -> Status {
    ServiceError::InvalidArgument {
        field: field.into(),
        reason: reason.into(),
    }
    .into()
}

pub(super) fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() {
        Err(invalid(field, "is required"))
    } else {
        no_nul(field, value)
    }
}

/// PostgreSQL text cannot hold NUL, so a NUL in a name or id would fail in
/// the database as `Internal`; it is a malformed field, named here.
pub(super) fn no_nul<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.contains('\0') {
        Err(invalid(field, "must not contain NUL characters"))
    } else {
        Ok(value)
    }
}

pub(super) fn json_object(field: &str, text: &str) -> Result<serde_json::Value, Status> {
    serde_json::from_str(text).map_err(|e| invalid(field, format!("malformed JSON: {e}")))
}

pub(super) fn non_empty(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

pub(super) fn limit(n: i64) -> Option<i64> {
    if n == 0 { None } else { Some(n) }
}
