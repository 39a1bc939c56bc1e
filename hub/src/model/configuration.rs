//! Configurations: named JSON documents of a tenant that Agents reference,
//! and the bodies that create and update one.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A named configuration document in a tenant, referenced by Agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    pub id: String,
    pub namespace: String,
    pub name: String,
    /// A JSON object.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST .../configurations`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateConfiguration {
    /// DNS-1123 label, unique in the namespace.
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )]
    pub name: String,
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// Body of `PUT .../configurations/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateConfiguration {
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    /// The version last read; a stale version is a conflict.
    pub version: i64,
}
