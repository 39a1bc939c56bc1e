//! The clawfed contract that hub and spoke both import.
//!
//! # Layout
//! - [`admin`]: generated `clawfed.admin.v1` gRPC types and service.
//! - [`link`]: generated `clawfed.link.v1` types for the hub/spoke stream,
//!   and [`link::close`]: the typed reason the hub ends a stream or refuses
//!   a call with, carried in gRPC status metadata; [`link::address`]: the
//!   form of a hub link address (`--hub-url`, `GoAway.redirect_url`).
//! - [`capability`]: what a spoke advertises in Hello and what a revision
//!   needs of it (placement).
//! - [`capacity`]: the labels and capacity a spoke reports for placement,
//!   and Kubernetes quantities as numbers.
//! - [`kinds`]: which Harness runs an Agent, who owns its workload.
//! - [`labels`]: the Kubernetes label and annotation keys clawfed owns.
//! - [`naming`]: name validation and the data-plane namespace rule.
//! - [`readiness`]: the Harness readiness contract, a pure function.
//! - [`tunnel`]: the data path (Gateway -> hub ingress -> spoke -> Harness):
//!   the CONNECT authority and refusal reasons.
//! - [`work`]: typed work specs carried in `link.v1.Work.spec`.
//! - [`startup`]: the plugin startup status a Harness publishes and the
//!   rule that lets it establish readiness.
//! - [`diagnostics`]: the runtime Pods' diagnostics endpoint and its bounds.
//! - [`digest`]: the applied-state digest of the heartbeat, computed the
//!   same way by spoke and hub.
//! - [`errors`]: an error and its causes as one line, each cause once.
//! - [`failover`]: the execution lease's periods (spoke fence, hub move).
//!
//! Nothing here performs I/O.

pub mod capability;
pub mod capacity;
pub mod diagnostics;
pub mod digest;
pub mod errors;
pub mod failover;
pub mod kinds;
pub mod labels;
pub mod naming;
pub mod readiness;
pub mod registry;
pub mod startup;
pub mod tunnel;
pub mod work;

/// The encoded `FileDescriptorSet` of `clawfed.admin.v1` and
/// `clawfed.link.v1` (decode with `prost_types::FileDescriptorSet`).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/clawfed_descriptors.bin"));

/// `clawfed.admin.v1`: the admin API, same semantics as REST `/api/v1`.
pub mod admin {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("clawfed.admin.v1");

        /// The value is a secret: Debug shows only whether one was given.
        impl std::fmt::Debug for SetAgentCredentialRequest {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("SetAgentCredentialRequest")
                    .field("namespace", &self.namespace)
                    .field("agent", &self.agent)
                    .field("kind", &self.kind)
                    .field(
                        "value",
                        &if self.value.is_empty() {
                            "<empty>"
                        } else {
                            "<redacted>"
                        },
                    )
                    .finish()
            }
        }
    }
}

/// `clawfed.link.v1`: the spoke link.
pub mod link {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("clawfed.link.v1");
    }

    /// The link contract's protobuf package: what a hub and a spoke speak
    /// (`clawfed-hub version` prints it).
    pub const CONTRACT: &str = "clawfed.link.v1";

    pub mod address;
    pub mod close;
}

/// How link certificates name a cluster: a URI SAN
/// `spiffe://clawfed/cluster/<cluster id>`. Both sides use this one rule.
pub mod identity {
    /// The URI SAN prefix of cluster certificates.
    pub const CLUSTER_URI_PREFIX: &str = "spiffe://clawfed/cluster/";

    /// The URI SAN naming `cluster_id`.
    pub fn cluster_uri(cluster_id: &str) -> String {
        format!("{CLUSTER_URI_PREFIX}{cluster_id}")
    }

    /// The cluster id a URI SAN names, if it is a cluster URI.
    pub fn cluster_id_from_uri(uri: &str) -> Option<&str> {
        uri.strip_prefix(CLUSTER_URI_PREFIX)
            .filter(|id| !id.is_empty() && !id.contains('/'))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn round_trip() {
            let uri = cluster_uri("abc");
            assert_eq!(cluster_id_from_uri(&uri), Some("abc"));
            assert_eq!(cluster_id_from_uri("spiffe://clawfed/cluster/"), None);
            assert_eq!(cluster_id_from_uri("spiffe://other/cluster/abc"), None);
            assert_eq!(cluster_id_from_uri("spiffe://clawfed/cluster/a/b"), None);
        }
    }
}

#[cfg(test)]
mod secret_debug_tests {
    #[test]
    fn a_credential_request_never_shows_its_value_in_debug() {
        let req = crate::admin::v1::SetAgentCredentialRequest {
            namespace: "team".into(),
            agent: "bot".into(),
            kind: "model-api-key".into(),
            value: "sk-very-secret".into(),
        };
        let shown = format!("{req:?} {req:#?}");
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        assert!(shown.contains("<redacted>") && shown.contains("model-api-key"));
    }
}
