//! Input validation. Each check names the field it rejects, in the JSON
//! spelling the caller used (`spec.requirementLabels["a/b"]`).

use std::collections::BTreeMap;

use clawfed_proto::naming;

use super::ServiceError;
use crate::model::{AgentSpec, ExecutionMode, HarnessKind, ImageRef, Resources};

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ServiceError {
    ServiceError::InvalidArgument {
        field: field.into(),
        reason: reason.into(),
    }
}

/// A DNS-1123 label (namespace, configuration, cluster names).
pub fn dns_label(field: &str, value: &str) -> Result<(), ServiceError> {
    naming::validate_dns1123_label(value).map_err(|e| invalid(field, e.to_string()))
}

/// An Agent name.
pub fn agent_name(field: &str, value: &str) -> Result<(), ServiceError> {
    naming::validate_agent_name(value).map_err(|e| invalid(field, e.to_string()))
}

/// Free text shown to people.
pub fn display_name(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.chars().count() > 256 {
        return Err(invalid(field, "must be at most 256 characters"));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(field, "must not contain control characters"));
    }
    Ok(())
}

/// A configuration document: a JSON object.
pub fn configuration_data(field: &str, value: &serde_json::Value) -> Result<(), ServiceError> {
    if !value.is_object() {
        return Err(invalid(field, "must be a JSON object"));
    }
    Ok(())
}

/// An `Idempotency-Key`: 1 to 255 visible ASCII characters.
pub fn idempotency_key(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.is_empty() || value.len() > 255 || !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(field, "must be 1 to 255 visible ASCII characters"));
    }
    Ok(())
}

/// Everything in an Agent spec. `default_image`: the installation has a
/// default agent image, so an empty `spec.image` means that one.
pub fn agent_spec(spec: &AgentSpec, default_image: bool) -> Result<(), ServiceError> {
    topology(spec)?;
    if !(default_image && spec.image.is_empty()) {
        image("spec.image", &spec.image)?;
    }
    if let Some(gateway) = &spec.gateway_image {
        image("spec.gatewayImage", gateway)?;
    }
    if let Some(config) = &spec.configuration {
        dns_label("spec.configuration", config)?;
    }
    resources(&spec.resources)?;
    for (key, value) in &spec.requirement_labels {
        let field = format!("spec.requirementLabels[{key:?}]");
        label_key(&field, key)?;
        if clawfed_proto::labels::is_reserved(key) {
            return Err(invalid(field, "is a label key clawfed sets itself"));
        }
        label_value(&field, value)?;
    }
    placement(&spec.placement)?;
    failover(spec)?;
    labels(
        "spec.placement.clusterSelector",
        &spec.placement.cluster_selector,
    )?;
    for (i, plugin) in spec.plugins.iter().enumerate() {
        dns_label(&format!("spec.plugins[{i}]"), plugin)?;
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, plugin) in spec.plugins.iter().enumerate() {
        if !seen.insert(plugin) {
            return Err(invalid(format!("spec.plugins[{i}]"), "is listed twice"));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, channel) in spec.channels.iter().enumerate() {
        let field = format!("spec.channels[{i}].name");
        dns_label(&field, &channel.name)?;
        if !seen.insert(&channel.name) {
            return Err(invalid(field, "is listed twice"));
        }
    }
    Ok(())
}

/// `spec.failover`: a bounded period, and a placement that leaves another
/// cluster to move to.
fn failover(spec: &crate::model::AgentSpec) -> Result<(), ServiceError> {
    let Some(f) = spec.failover else {
        return Ok(());
    };
    clawfed_proto::failover::check_after_seconds(f.after_seconds)
        .map_err(|why| invalid("spec.failover.afterSeconds", why))?;
    if spec.placement.cluster.is_some() {
        return Err(invalid(
            "spec.failover",
            "needs a placement that can choose another cluster: spec.placement.cluster pins the Agent",
        ));
    }
    if spec.placement.clusters.len() == 1 {
        return Err(invalid(
            "spec.failover",
            "needs a placement that can choose another cluster: spec.placement.clusters lists one",
        ));
    }
    Ok(())
}

/// `spec.placement`: a pinned cluster or a preference list (not both),
/// cluster names as DNS labels, each listed once.
fn placement(p: &crate::model::Placement) -> Result<(), ServiceError> {
    if let Some(cluster) = &p.cluster {
        dns_label("spec.placement.cluster", cluster)?;
        if !p.clusters.is_empty() {
            return Err(invalid(
                "spec.placement.clusters",
                "give either spec.placement.cluster (pinned) or spec.placement.clusters (a preference list), not both",
            ));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, cluster) in p.clusters.iter().enumerate() {
        let field = format!("spec.placement.clusters[{i}]");
        dns_label(&field, cluster)?;
        if !seen.insert(cluster) {
            return Err(invalid(field, "is listed twice"));
        }
    }
    Ok(())
}

/// The topology rules of the OpenClaw Compute Driver that a spec alone
/// decides (what a cluster must offer is decided at placement):
/// - embedded OpenClaw runs its gateway inside the data-plane workload, so
///   it is never handed to a SandboxDriver provider;
/// - enabled external channels need dedicated execution;
/// - dedicated native OpenClaw runs only under a provisioning SandboxDriver
///   (which must also declare networking, filesystem and process
///   containment: checked against the cluster at placement).
fn topology(spec: &AgentSpec) -> Result<(), ServiceError> {
    match (spec.harness_kind, spec.execution_mode) {
        (HarnessKind::EmbeddedOpenclaw, ExecutionMode::Provider) => {
            return Err(invalid(
                "spec.executionMode",
                "embedded-openclaw is never delegated to a provider: use ordinary, or a dedicated harness kind",
            ));
        }
        (HarnessKind::DedicatedOpenclaw, ExecutionMode::Ordinary) => {
            return Err(invalid(
                "spec.executionMode",
                "dedicated-openclaw needs a provisioning SandboxDriver that declares networking, \
                 filesystem and process containment: use executionMode provider",
            ));
        }
        _ => {}
    }
    if !spec.harness_kind.is_dedicated()
        && let Some(i) = spec.channels.iter().position(|c| c.enabled)
    {
        return Err(invalid(
            format!("spec.channels[{i}]"),
            "enabled external channels need dedicated execution: use harnessKind \
             dedicated-openclaw or dedicated-codex, or disable the channel",
        ));
    }
    Ok(())
}

fn labels(field: &str, map: &BTreeMap<String, String>) -> Result<(), ServiceError> {
    for (key, value) in map {
        let field = format!("{field}[{key:?}]");
        label_key(&field, key)?;
        label_value(&field, value)?;
    }
    Ok(())
}

/// An image reference; a digest, when present, must be `sha256:<64 hex>`.
pub fn image(field: &str, reference: &str) -> Result<(), ServiceError> {
    if reference.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if reference.chars().count() > super::patterns::IMAGE_MAX {
        return Err(invalid(field, "must be at most 512 characters"));
    }
    if reference
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(invalid(field, "must not contain whitespace"));
    }
    if let Some((_, digest)) = reference.split_once('@') {
        let ok = digest
            .strip_prefix("sha256:")
            .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if !ok {
            return Err(invalid(field, "digest must be sha256:<64 hex characters>"));
        }
    }
    Ok(())
}

/// The image as admitted into a revision, with its digest when pinned.
pub fn image_ref(role: &str, reference: &str) -> ImageRef {
    ImageRef {
        role: role.to_owned(),
        reference: reference.to_owned(),
        digest: reference
            .split_once('@')
            .map(|(_, digest)| digest.to_owned()),
    }
}

fn resources(r: &Resources) -> Result<(), ServiceError> {
    let fields = [
        ("spec.resources.cpuRequest", &r.cpu_request),
        ("spec.resources.cpuLimit", &r.cpu_limit),
        ("spec.resources.memoryRequest", &r.memory_request),
        ("spec.resources.memoryLimit", &r.memory_limit),
    ];
    for (field, value) in fields {
        if let Some(v) = value {
            quantity(field, v)?;
        }
    }
    Ok(())
}

/// A Kubernetes resource quantity such as `500m`, `2`, `1.5Gi` (the rule is
/// [`clawfed_kube::quantity::check`], shared with the spoke).
fn quantity(field: &str, value: &str) -> Result<(), ServiceError> {
    clawfed_kube::quantity::check(value).map_err(|e| invalid(field, e.to_string()))
}

/// A Kubernetes label key: `[prefix/]name`.
fn label_key(field: &str, key: &str) -> Result<(), ServiceError> {
    match naming::label_key_error(key) {
        Some(reason) => Err(invalid(field, reason)),
        None => Ok(()),
    }
}

fn label_value(field: &str, value: &str) -> Result<(), ServiceError> {
    if !(value.is_empty() || naming::is_label_name(value)) {
        return Err(invalid(
            field,
            "label value must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExecutionMode, HarnessKind, Placement};

    fn spec() -> AgentSpec {
        AgentSpec {
            harness_kind: HarnessKind::EmbeddedOpenclaw,
            execution_mode: ExecutionMode::Ordinary,
            image: "ghcr.io/openclaw/openclaw:1.0".into(),
            gateway_image: None,
            configuration: None,
            resources: Resources::default(),
            requirement_labels: BTreeMap::new(),
            placement: Placement::default(),
            plugins: vec![],
            channels: vec![],
            failover: None,
        }
    }

    fn field_of(err: ServiceError) -> String {
        match err {
            ServiceError::InvalidArgument { field, .. } => field,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_plain_spec() {
        agent_spec(&spec(), false).unwrap();
    }

    #[test]
    fn an_empty_image_needs_the_installation_default() {
        let mut s = spec();
        s.image = String::new();
        assert_eq!(field_of(agent_spec(&s, false).unwrap_err()), "spec.image");
        agent_spec(&s, true).unwrap();
        s.image = "has space".into();
        assert_eq!(field_of(agent_spec(&s, true).unwrap_err()), "spec.image");
    }

    #[test]
    fn images() {
        let digest = format!("img@sha256:{}", "a".repeat(64));
        image("f", &digest).unwrap();
        assert_eq!(image_ref("harness", &digest).digest.unwrap().len(), 71);
        assert!(image("f", "img@sha256:abc").is_err());
        assert!(image("f", "img@md5:abc").is_err());
        assert!(image("f", "has space").is_err());
        assert!(image("f", "").is_err());
        assert_eq!(image_ref("harness", "img:1").digest, None);
    }

    #[test]
    fn names_the_failing_field() {
        let mut s = spec();
        s.resources.memory_limit = Some("lots".into());
        assert_eq!(
            field_of(agent_spec(&s, false).unwrap_err()),
            "spec.resources.memoryLimit"
        );
        let mut s = spec();
        s.requirement_labels
            .insert("clawfed.io/agent".into(), "x".into());
        assert_eq!(
            field_of(agent_spec(&s, false).unwrap_err()),
            "spec.requirementLabels[\"clawfed.io/agent\"]"
        );
        let mut s = spec();
        s.requirement_labels.insert("gpu".into(), "-bad".into());
        assert!(agent_spec(&s, false).is_err());
        let mut s = spec();
        s.plugins = vec!["web".into(), "web".into()];
        assert_eq!(
            field_of(agent_spec(&s, false).unwrap_err()),
            "spec.plugins[1]"
        );
        let mut s = spec();
        s.placement.cluster = Some("Exec_A".into());
        assert_eq!(
            field_of(agent_spec(&s, false).unwrap_err()),
            "spec.placement.cluster"
        );
    }

    #[test]
    fn quantities_and_label_keys() {
        for ok in ["1", "500m", "1.5Gi", "512Mi", "2k"] {
            quantity("f", ok).unwrap();
        }
        for bad in ["", "m", "1.", "abc", "1.5Gb", "-1"] {
            assert!(quantity("f", bad).is_err(), "{bad}");
        }
        label_key("f", "example.com/gpu").unwrap();
        label_key("f", "gpu").unwrap();
        assert!(label_key("f", "/gpu").is_err());
        assert!(label_key("f", "Example_.com/gpu").is_err());
        assert!(label_key("f", "gpu-").is_err());
    }

    #[test]
    fn failover_needs_a_bounded_period_and_somewhere_else_to_go() {
        let mut s = spec();
        s.failover = Some(crate::model::Failover { after_seconds: 9 });
        assert_eq!(
            field_of(agent_spec(&s, false).unwrap_err()),
            "spec.failover.afterSeconds"
        );
        s.failover = Some(crate::model::Failover { after_seconds: 30 });
        agent_spec(&s, false).unwrap();
        s.placement.cluster = Some("exec-a".into());
        assert_eq!(
            field_of(agent_spec(&s, false).unwrap_err()),
            "spec.failover"
        );
        s.placement.cluster = None;
        s.placement.clusters = vec!["exec-a".into()];
        assert_eq!(
            field_of(agent_spec(&s, false).unwrap_err()),
            "spec.failover"
        );
        s.placement.clusters.push("exec-b".into());
        agent_spec(&s, false).unwrap();
    }
}
