//! A namespace's guard rails: its ResourceQuota and the LimitRange of
//! container defaults, built the same way for the hub's Gateway namespaces
//! and the spoke's data-plane namespaces. Pure.

use std::collections::BTreeMap;

use clawfed_proto::work::ContainerDefaults;
use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, ResourceQuota, ResourceQuotaSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::quantity::quantities;

/// The ResourceQuota `metadata` names, with `hard` as its limits.
pub fn resource_quota(metadata: ObjectMeta, hard: &BTreeMap<String, String>) -> ResourceQuota {
    ResourceQuota {
        metadata,
        spec: Some(ResourceQuotaSpec {
            hard: quantities(hard),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The LimitRange `metadata` names, giving containers `defaults`.
pub fn container_limits(metadata: ObjectMeta, defaults: &ContainerDefaults) -> LimitRange {
    LimitRange {
        metadata,
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".into(),
                default: quantities(&defaults.default_limit),
                default_request: quantities(&defaults.default_request),
                ..Default::default()
            }],
        }),
    }
}
