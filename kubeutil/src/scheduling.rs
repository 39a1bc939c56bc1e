//! Where workload Pods may be scheduled: the installation's tolerations as
//! Kubernetes objects (the contract's [`clawfed_proto::work::Toleration`]).

use clawfed_proto::work::Toleration;

/// The Pod's `tolerations`; `None` for none (the field stays unset).
pub fn tolerations(from: &[Toleration]) -> Option<Vec<k8s_openapi::api::core::v1::Toleration>> {
    (!from.is_empty()).then(|| {
        from.iter()
            .map(|t| k8s_openapi::api::core::v1::Toleration {
                key: t.key.clone(),
                operator: t.operator.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                toleration_seconds: t.toleration_seconds,
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_carried_and_none_is_unset() {
        assert_eq!(tolerations(&[]), None);
        let t = Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("agents".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: Some(30),
        };
        let k = tolerations(std::slice::from_ref(&t)).expect("one");
        assert_eq!(k[0].key.as_deref(), Some("dedicated"));
        assert_eq!(k[0].operator.as_deref(), Some("Equal"));
        assert_eq!(k[0].value.as_deref(), Some("agents"));
        assert_eq!(k[0].effect.as_deref(), Some("NoExecute"));
        assert_eq!(k[0].toleration_seconds, Some(30));
    }
}
