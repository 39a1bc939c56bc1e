//! The work specs and Gateway targets the pipeline sends, built from a
//! revision without I/O.

use std::collections::BTreeMap;

use clawfed_proto::work::{self as spec, target};

use crate::gateway::{GatewayTarget, TunnelEndpoint};
use crate::model::{Agent, AgentRevision, ExecutionMode, Namespace};

/// The Harness work target of a revision.
pub fn harness_target(ns: &Namespace, rev: &AgentRevision) -> String {
    target::harness(&ns.id, &rev.agent, rev.number)
}

/// The namespace work target of a tenant.
pub fn namespace_target(ns: &Namespace) -> String {
    target::namespace(&ns.id)
}

fn execution(rev: &AgentRevision) -> spec::ExecutionMode {
    match rev.spec.execution_mode {
        ExecutionMode::Ordinary => spec::ExecutionMode::Ordinary,
        ExecutionMode::Provider => spec::ExecutionMode::Provider,
    }
}

/// `namespace.ensure` for the tenant.
pub fn namespace_work(ns: &Namespace) -> spec::WorkSpec {
    spec::WorkSpec::NamespaceEnsure(spec::NamespaceWork {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        adopt: ns.adopted.then(|| ns.data_plane_namespace.clone()),
        ..Default::default()
    })
}

/// `harness.apply` for `rev` in `data_plane_namespace` (the physical name
/// the cluster resolved), with the predecessors that run on the same
/// cluster (a dedicated Harness stops them first). `require_digest` is the
/// installation's digest policy, which the spoke enforces on its own too.
/// `startup_status` (`pipeline.startupStatus`) makes the spoke require a
/// valid plugin startup status of the revision's admitted selections
/// before it reports the Harness ready.
pub fn harness_work(
    ns: &Namespace,
    data_plane_namespace: &str,
    rev: &AgentRevision,
    same_cluster_predecessors: &[AgentRevision],
    require_digest: bool,
    startup_status: bool,
) -> spec::WorkSpec {
    let r = &rev.spec.resources;
    let quantities = |cpu: &Option<String>, memory: &Option<String>| {
        [("cpu", cpu), ("memory", memory)]
            .into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_owned(), v)))
            .collect::<BTreeMap<_, _>>()
    };
    let requests = quantities(&r.cpu_request, &r.memory_request);
    let limits = quantities(&r.cpu_limit, &r.memory_limit);
    spec::WorkSpec::HarnessApply(Box::new(spec::HarnessWork {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        data_plane_namespace: data_plane_namespace.to_owned(),
        agent: rev.agent.clone(),
        revision: rev.number,
        revision_id: rev.id.clone(),
        harness_kind: rev.spec.harness_kind.as_str().to_owned(),
        image: rev.spec.image.clone(),
        require_digest,
        requirement_labels: rev.spec.requirement_labels.clone(),
        resources: spec::Resources { requests, limits },
        port: spec::harness::DEFAULT_PORT,
        env: BTreeMap::new(),
        workspace: rev
            .spec
            .harness_kind
            .is_dedicated()
            .then(|| spec::Workspace {
                size: "1Gi".into(),
                storage_class: None,
            }),
        credential: spec::SecretData::default(),
        dedicated: rev.spec.harness_kind.is_dedicated(),
        predecessors: same_cluster_predecessors
            .iter()
            .map(|p| spec::Predecessor {
                revision: p.number,
                revision_id: p.id.clone(),
                execution: execution(p),
            })
            .collect(),
        execution: execution(rev),
        node_selector: BTreeMap::new(),
        headless_service: false,
        plugin_selections: rev.spec.plugins.clone(),
        require_startup_status: startup_status,
    }))
}

/// The body of `harness.stop` and `harness.retire` for `rev`.
pub fn revision_work(
    ns: &Namespace,
    data_plane_namespace: &str,
    rev: &AgentRevision,
) -> spec::RevisionWork {
    spec::RevisionWork {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        data_plane_namespace: data_plane_namespace.to_owned(),
        agent: rev.agent.clone(),
        revision: rev.number,
        revision_id: rev.id.clone(),
        execution: execution(rev),
    }
}

/// The Gateway of `rev`, pointed at its Harness (through the hub's tunnel
/// ingress `tunnel`, or directly when `None`).
pub fn gateway_target(
    ns: &Namespace,
    data_plane_namespace: &str,
    agent: &Agent,
    rev: &AgentRevision,
    tunnel: Option<&TunnelEndpoint>,
) -> GatewayTarget {
    GatewayTarget {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        agent: agent.name.clone(),
        agent_id: agent.id.clone(),
        revision: rev.number,
        revision_id: rev.id.clone(),
        image: rev
            .images
            .iter()
            .find(|i| i.role == "gateway")
            .map_or_else(String::new, |i| i.reference.clone()),
        harness_cluster: rev.resolved_cluster.clone().unwrap_or_default(),
        harness_namespace: data_plane_namespace.to_owned(),
        harness_port: spec::harness::DEFAULT_PORT,
        tunnel: tunnel.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace() -> Namespace {
        serde_json::from_value(serde_json::json!({
            "id": "0190a0b0-0000-7000-8000-000000000001",
            "name": "team",
            "displayName": "team",
            "dataPlaneNamespace": "oce-0123456789abcde",
            "adopted": false,
            "state": "active",
            "provisionedAt": null,
            "version": 1,
            "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("namespace")
    }

    fn revision(image: &str) -> AgentRevision {
        serde_json::from_value(serde_json::json!({
            "id": "0190a0b0-0000-7000-8000-000000000002",
            "namespace": "team",
            "agent": "bot",
            "number": 1,
            "spec": { "harnessKind": "embedded-openclaw", "image": image },
            "configuration": null,
            "images": [{ "role": "harness", "reference": image,
                         "digest": image.split_once('@').map(|(_, d)| d) }],
            "resolvedCluster": "exec-a",
            "phase": "pending",
            "reason": null,
            "rolledBackFrom": null,
            "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("revision")
    }

    /// Issue 12: the admitted selections and the startup-status setting
    /// reach the spoke; the setting is the installation's, not the spec's.
    #[test]
    fn harness_work_carries_plugin_selections_and_the_startup_setting() {
        let mut rev = revision("reg.example/harness:1.0");
        rev.spec.plugins = vec!["search".into(), "mail".into()];
        for required in [true, false] {
            let spec::WorkSpec::HarnessApply(work) =
                harness_work(&namespace(), "oce-x", &rev, &[], false, required)
            else {
                panic!("not harness.apply");
            };
            assert_eq!(work.plugin_selections, ["search", "mail"]);
            assert_eq!(work.require_startup_status, required);
        }
    }

    /// Issue 9, defect 7: the spoke's digest gate is the installation
    /// policy, not a consequence of whether the images happen to be pinned.
    #[test]
    fn harness_work_carries_the_digest_policy() {
        let pinned = format!("reg.example/harness@sha256:{}", "a".repeat(64));
        for image in ["reg.example/harness:1.0", pinned.as_str()] {
            for policy in [true, false] {
                let spec::WorkSpec::HarnessApply(work) =
                    harness_work(&namespace(), "oce-x", &revision(image), &[], policy, true)
                else {
                    panic!("not harness.apply");
                };
                assert_eq!(work.require_digest, policy, "{image}");
                assert_eq!(work.image, image);
                assert_eq!(
                    work.data_plane_namespace, "oce-x",
                    "the name the cluster resolved"
                );
            }
        }
    }
}
