//! Domain types of the hub: what the store keeps and what REST returns.
//!
//! REST serializes these directly (camelCase JSON); gRPC converts them to and
//! from `clawfed.admin.v1` messages in `api::grpc`. Request types reject
//! unknown fields so a typo is an error, not a silently ignored setting.

//!
//! One file per resource: `namespace`, `configuration`, `agent` (with its
//! request bodies), `revision`, `cluster` (and its `drain`), `work`, `audit`, `fleet`,
//! `diagnosis`, and `event` (the watch stream); this file holds the
//! request helpers and the list envelope they share.

use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

mod agent;
mod audit;
mod cluster;
mod configuration;
mod diagnosis;
mod drain;
pub mod event;
mod fleet;
mod namespace;
mod revision;
mod work;

pub use agent::{
    Agent, AgentSpec, Channel, ChatAnswer, ChatRequest, CreateAgent, CredentialMeta, DeployRequest,
    DesiredState, ExecutionMode, Failover, HarnessKind, Placement, Resources, SetCredential,
    Spread, UpdateAgent,
};
pub use audit::AuditEvent;
pub use cluster::{
    BootstrapTokenCreated, Cluster, ClusterCapacity, ConnectionState, CreateBootstrapToken,
    ResourceAmounts,
};
pub use configuration::{Configuration, CreateConfiguration, UpdateConfiguration};
pub use diagnosis::{ComponentDiagnosis, Diagnosis, DiagnosticCheck};
pub use drain::{
    Drain, DrainAgent, DrainAgentState, DrainProgress, DrainRequest, MAX_DRAIN_PARALLELISM,
    WorkspaceOrigin,
};
pub use fleet::FleetSummary;
pub use namespace::{
    CreateNamespace, Namespace, NamespaceClusterState, NamespaceClusterStatus, NamespaceState,
};
pub use revision::{AgentRevision, ImageRef, RevisionPhase, RevisionProgress};
pub use work::{WorkItem, WorkState};

/// A request struct that must arrive as a JSON object. serde's derived
/// structs also accept a sequence and fill the fields by position
/// (`["x"]` would create namespace `x`); this accepts only a map.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object(d).map(Object)
    }
}

/// `deserialize_with` for a struct field that must be a JSON object.
pub fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct OnlyMaps<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for OnlyMaps<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(OnlyMaps(PhantomData))
}

/// `deserialize_with` for a list whose items must be JSON objects.
pub fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Vec::<Object<T>>::deserialize(d)?
        .into_iter()
        .map(|o| o.0)
        .collect())
}

/// A list response.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct List<T> {
    pub items: Vec<T>,
}

impl<T> From<Vec<T>> for List<T> {
    fn from(items: Vec<T>) -> Self {
        Self { items }
    }
}
