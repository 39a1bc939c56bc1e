//! Whether one revision's Gateway is ready: a pure verdict over the
//! Deployment and the Agent's Gateway Pods as read from the cluster.
//!
//! Ready means: the Deployment's template is this revision, the controller has
//! observed it and reports it available with its one replica updated, and
//! exactly one live Pod of the Agent's Gateway exists, of this revision, with
//! `Ready=True`. Pods being deleted are ignored; a live Pod of another
//! revision (a `Recreate` still in progress) is not ready.

use clawfed_proto::labels;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Traffic may be switched to the revision.
    Ready,
    /// Not (yet) ready, and why.
    NotReady(NotReady),
}

impl Readiness {
    /// True for [`Readiness::Ready`].
    pub fn is_ready(self) -> bool {
        matches!(self, Readiness::Ready)
    }
}

/// Why a Gateway revision is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// There is no Gateway Deployment.
    NoDeployment,
    /// The Deployment runs another revision.
    OtherRevisionDeployed,
    /// The controller has not rolled the current template out yet.
    RolloutPending,
    /// The Deployment is not `Available`.
    Unavailable,
    /// No live Gateway Pod of the revision.
    NoPod,
    /// More than one live Gateway Pod (of any revision).
    SeveralPods,
    /// The one Pod is not `Ready=True`.
    PodNotReady,
}

impl NotReady {
    /// A stable reason code (for status and logs).
    pub fn as_str(self) -> &'static str {
        match self {
            NotReady::NoDeployment => "NoDeployment",
            NotReady::OtherRevisionDeployed => "OtherRevisionDeployed",
            NotReady::RolloutPending => "RolloutPending",
            NotReady::Unavailable => "Unavailable",
            NotReady::NoPod => "NoPod",
            NotReady::SeveralPods => "SeveralPods",
            NotReady::PodNotReady => "PodNotReady",
        }
    }
}

fn label<'a>(
    labels: Option<&'a std::collections::BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    labels.and_then(|l| l.get(key)).map(String::as_str)
}

/// The verdict for `revision`, given the Gateway Deployment (if any) and the
/// Pods selected by the Agent's Gateway selector.
pub fn evaluate(revision: i64, deployment: Option<&Deployment>, pods: &[Pod]) -> Readiness {
    use Readiness::NotReady as No;
    let rev = revision.to_string();
    let Some(d) = deployment else {
        return No(NotReady::NoDeployment);
    };
    let spec = &d.spec;
    let template_rev = label(
        spec.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref()),
        labels::REVISION,
    );
    if template_rev != Some(rev.as_str()) {
        return No(NotReady::OtherRevisionDeployed);
    }
    let Some(status) = &d.status else {
        return No(NotReady::RolloutPending);
    };
    let observed = status.observed_generation.unwrap_or(-1);
    if d.metadata.generation.is_none_or(|g| observed < g)
        || status.updated_replicas.unwrap_or(0) < 1
    {
        return No(NotReady::RolloutPending);
    }
    let available =
        status.conditions.iter().flatten().any(|c| {
            c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True")
        });
    if !available || status.available_replicas.unwrap_or(0) < 1 {
        return No(NotReady::Unavailable);
    }
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    match live.as_slice() {
        [] => No(NotReady::NoPod),
        [p] if label(p.metadata.labels.as_ref(), labels::REVISION) != Some(rev.as_str()) => {
            No(NotReady::NoPod)
        }
        [p] => {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                Readiness::Ready
            } else {
                No(NotReady::PodNotReady)
            }
        }
        _ => No(NotReady::SeveralPods),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::collections::BTreeMap;

    fn rev_labels(rev: i64) -> Option<BTreeMap<String, String>> {
        Some(BTreeMap::from([(
            labels::REVISION.to_string(),
            rev.to_string(),
        )]))
    }

    fn deployment(rev: i64, generation: i64, observed: i64, available: bool) -> Deployment {
        rolled_out(rev_labels(rev), generation, observed, available)
    }

    /// A Deployment whose Pods carry `pod_labels`, at `generation`, its
    /// rollout observed at `observed` and Available or not (the watch's
    /// tests use it too).
    pub(in crate::gateway) fn rolled_out(
        pod_labels: Option<BTreeMap<String, String>>,
        generation: i64,
        observed: i64,
        available: bool,
    ) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                generation: Some(generation),
                ..Default::default()
            },
            spec: DeploymentSpec {
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: pod_labels,
                        ..Default::default()
                    }),
                    spec: None,
                },
                ..Default::default()
            },
            status: Some(DeploymentStatus {
                observed_generation: Some(observed),
                updated_replicas: Some(1),
                available_replicas: Some(i32::from(available)),
                conditions: Some(vec![DeploymentCondition {
                    type_: Some("Available".into()),
                    status: Some(if available { "True" } else { "False" }.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn pod(rev: i64, ready: Option<bool>, deleting: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                labels: rev_labels(rev),
                deletion_timestamp: deleting.then(|| Time(Default::default())),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: ready.map(|r| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: if r { "True" } else { "False" }.into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn table() {
        use NotReady::*;
        let d = deployment(2, 3, 3, true);
        let cases: Vec<(Option<Deployment>, Vec<Pod>, Readiness)> = vec![
            (
                Some(d.clone()),
                vec![pod(2, Some(true), false)],
                Readiness::Ready,
            ),
            (
                Some(d.clone()),
                vec![pod(2, Some(true), false), pod(1, Some(true), true)],
                Readiness::Ready,
            ),
            (
                None,
                vec![pod(2, Some(true), false)],
                Readiness::NotReady(NoDeployment),
            ),
            (
                Some(deployment(1, 3, 3, true)),
                vec![pod(1, Some(true), false)],
                Readiness::NotReady(OtherRevisionDeployed),
            ),
            (
                Some(deployment(2, 4, 3, true)),
                vec![pod(2, Some(true), false)],
                Readiness::NotReady(RolloutPending),
            ),
            (
                Some(deployment(2, 3, 3, false)),
                vec![pod(2, Some(true), false)],
                Readiness::NotReady(Unavailable),
            ),
            (Some(d.clone()), vec![], Readiness::NotReady(NoPod)),
            (
                Some(d.clone()),
                vec![pod(1, Some(true), false)],
                Readiness::NotReady(NoPod),
            ),
            (
                Some(d.clone()),
                vec![pod(2, Some(true), false), pod(1, Some(true), false)],
                Readiness::NotReady(SeveralPods),
            ),
            (
                Some(d.clone()),
                vec![pod(2, Some(false), false)],
                Readiness::NotReady(PodNotReady),
            ),
            (
                Some(d),
                vec![pod(2, None, false)],
                Readiness::NotReady(PodNotReady),
            ),
        ];
        for (i, (d, pods, want)) in cases.into_iter().enumerate() {
            assert_eq!(evaluate(2, d.as_ref(), &pods), want, "case {i}");
        }
    }
}
