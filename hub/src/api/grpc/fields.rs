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

/// A namespace and the key of an object in it (`name`, or `agent` for an
/// Agent's revisions and credentials): both required, checked in that order.
pub(super) fn scoped<'a>(
    namespace: &'a str,
    field: &str,
    value: &'a str,
) -> Result<(&'a str, &'a str), Status> {
    Ok((required("namespace", namespace)?, required(field, value)?))
}

/// A revision number: proto3 reads an absent one as 0, which names none.
pub(super) fn positive(field: &str, n: i64) -> Result<i64, Status> {
    if n <= 0 {
        Err(invalid(field, "must be a positive integer"))
    } else {
        Ok(n)
    }
}

/// An optional namespace filter: empty is absent; a present one must be
/// free of NUL.
pub(super) fn namespace_filter(namespace: String) -> Result<Option<String>, Status> {
    let ns = non_empty(namespace);
    if let Some(ns) = &ns {
        no_nul("namespace", ns)?;
    }
    Ok(ns)
}
