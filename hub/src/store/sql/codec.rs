//! How the tables' values are stored and read back: times as Unix
//! milliseconds, documents as JSON text, typed column reads that report a
//! bad value as corrupt, and the not-found and unique-violation errors.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::any::AnyRow;
use sqlx::{Any, Row};

use crate::store::{Result, StoreError};

pub(in crate::store) fn not_found(kind: &'static str, name: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        name: name.to_owned(),
    }
}

pub(super) fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

/// Unix milliseconds, the stored form of a time.
pub(in crate::store) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(in crate::store) fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

pub(super) fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        what: "document",
        detail: e.to_string(),
    })
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(
    what: &'static str,
    text: &str,
) -> Result<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what,
        detail: e.to_string(),
    })
}

pub(super) fn corrupt(what: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| StoreError::Corrupt {
        what,
        detail: e.to_string(),
    }
}

pub(super) fn get<'r, T>(row: &'r AnyRow, what: &'static str, col: &str) -> Result<T>
where
    T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
{
    row.try_get(col).map_err(corrupt(what))
}

pub(super) fn parse_enum<T>(
    what: &'static str,
    value: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T> {
    parse(value).ok_or_else(|| StoreError::Corrupt {
        what,
        detail: format!("unknown value {value:?}"),
    })
}
