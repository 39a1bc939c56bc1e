//! Readiness: the watch-driven [`observer::Observer`] feeding the pure
//! contract of `clawfed_proto::readiness`, and the conversion from
//! k8s-openapi Pods into the contract's observation types.

pub mod observer;

use clawfed_proto::readiness::{ConditionObservation, PodObservation, PodStatusObservation};
use k8s_openapi::api::core::v1::Pod;

/// What the contract needs of a Pod.
pub fn observe(pod: &Pod) -> PodObservation {
    PodObservation {
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        status: pod.status.as_ref().map(|s| PodStatusObservation {
            conditions: s.conditions.as_ref().map(|cs| {
                cs.iter()
                    .map(|c| ConditionObservation {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                    })
                    .collect()
            }),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    #[test]
    fn converts_identity_deletion_and_conditions() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("oce-x".into()),
                deletion_timestamp: Some(Time(Default::default())),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let o = observe(&pod);
        assert!(o.deleting);
        assert_eq!(o.name.as_deref(), Some("p"));
        let c = &o.status.and_then(|s| s.conditions).expect("conditions")[0];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Ready", "True"));
        assert_eq!(observe(&Pod::default()).status, None);
    }
}
