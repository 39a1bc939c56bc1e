//! Label and annotation keys written on Kubernetes objects. Both sides read
//! these, so they live in one place.

/// The tenant (clawfed namespace name) an object belongs to.
pub const TENANT: &str = "clawfed.io/tenant";
/// The clawfed namespace id, as an annotation on the physical namespace.
pub const NAMESPACE_ID_ANNOTATION: &str = "clawfed.io/namespace-id";
/// Marks objects clawfed manages.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY`].
pub const MANAGER: &str = "clawfed";
/// The Agent an object belongs to.
pub const AGENT: &str = "clawfed.io/agent";
/// The AgentRevision number an object belongs to.
pub const REVISION: &str = "clawfed.io/revision";
/// The workload role: `gateway` or `harness`.
pub const WORKLOAD_ROLE: &str = "clawfed.io/workload-role";

/// Annotation: the Work generation the spoke applied to an object.
pub const GENERATION_ANNOTATION: &str = "clawfed.io/generation";
/// Annotation: the Work target an object was applied for.
pub const WORK_TARGET_ANNOTATION: &str = "clawfed.io/work-target";
/// Annotation: the AgentRevision id of an object.
pub const REVISION_ID_ANNOTATION: &str = "clawfed.io/revision-id";
/// Label on a data-plane namespace clawfed adopted (operator-named); value `true`.
pub const ADOPTED: &str = "clawfed.io/adopted";
/// Label an operator puts on an existing namespace to let clawfed adopt it;
/// value `true`. Only an operator sets or removes it: the spoke's admission
/// policy (deploy/spoke/admission.yaml) refuses the spoke any change to it,
/// and refuses it any write to an unmanaged namespace that lacks it.
pub const ADOPTABLE: &str = "clawfed.io/adoptable";

/// Label on a tenant's managed Gateway runtime namespace in the control
/// cluster: the clawfed namespace id it holds the Gateways of. The hub
/// finds, changes and deletes only namespaces carrying it
/// (deploy/hub/admission.yaml).
pub const GATEWAY_NAMESPACE: &str = "clawfed.io/gateway-namespace";

/// Annotation on the Harness Service: the revision's requirement labels
/// (JSON), so a restarted spoke can rebuild its readiness queries from the
/// cluster.
pub const REQUIREMENTS_ANNOTATION: &str = "clawfed.io/requirement-labels";
/// Annotation on the Harness Service: the execution mode.
pub const EXECUTION_ANNOTATION: &str = "clawfed.io/execution";
/// Annotation on the Harness Service, present when readiness requires a
/// plugin startup status (JSON), so a restarted spoke keeps requiring it.
pub const STARTUP_ANNOTATION: &str = "clawfed.io/startup-status";
/// Label of Harness objects: the revision's Harness kind.
pub const HARNESS_KIND: &str = "clawfed.io/harness-kind";
/// Label marking a spoke's desired-state record (value `true`).
pub const DESIRED_STATE: &str = "clawfed.io/desired-state";

/// The prefix of every label and annotation key clawfed owns.
pub const CLAWFED_PREFIX: &str = "clawfed.io/";

/// Whether a label key is clawfed's own (its prefix, or the manager label):
/// a user-supplied label (an Agent's requirement labels) may not claim it.
/// The one rule, for the hub's admission and the spoke's check alike.
pub fn is_reserved(key: &str) -> bool {
    key.starts_with(CLAWFED_PREFIX) || key == MANAGED_BY
}

/// The markers the OpenClaw Kubernetes Compute Driver puts on the tenant
/// namespaces it made. clawfed recognises them (all three, exactly, as
/// with its own) so an existing OpenClaw installation's namespaces can be
/// taken over; the operator consents with [`ADOPTABLE`].
pub mod openclaw {
    /// The tenant label.
    pub const TENANT: &str = "openclaw.ai/tenant";
    /// The namespace-id annotation.
    pub const NAMESPACE_ID_ANNOTATION: &str = "openclaw.ai/namespace-id";
    /// Value of [`super::MANAGED_BY`] on the driver's namespaces.
    pub const MANAGER: &str = "openclaw-compute-driver";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_keys_are_clawfeds_prefix_and_the_manager_label() {
        for key in [
            TENANT,
            AGENT,
            REVISION,
            WORKLOAD_ROLE,
            MANAGED_BY,
            "clawfed.io/x",
        ] {
            assert!(is_reserved(key), "{key}");
        }
        for key in [
            "sandbox.clawfed.io/class",
            "app.kubernetes.io/managed-by-team",
            "app.kubernetes.io/name",
            "clawfed.iox/a",
        ] {
            assert!(!is_reserved(key), "{key}");
        }
    }
}
