//! The Gateway NetworkPolicy: default deny, in from the approved clients,
//! the trusted proxies and the hub, out to DNS and the Harness path.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{agent_selector, meta, names};
use crate::gateway::{GatewayConfig, GatewaySpec};

pub(super) fn tcp_port(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

pub(super) fn match_labels(m: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(m.clone()),
        ..Default::default()
    }
}

/// The hub's Pods (`gateway.options.hub`) as a NetworkPolicy peer.
fn hub_peer(c: &GatewayConfig) -> NetworkPolicyPeer {
    let hub_ns = BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        c.hub.namespace.clone(),
    )]);
    NetworkPolicyPeer {
        namespace_selector: Some(match_labels(&hub_ns)),
        pod_selector: Some(match_labels(&c.hub.pod_labels)),
        ..Default::default()
    }
}

/// The Gateway NetworkPolicy: default deny in both directions for the
/// Agent's Gateway Pods. In: only the approved clients and the trusted proxy
/// CIDRs, on the Gateway port. Out: DNS, and the hub's tunnel ingress in
/// tunnel mode, the Harness endpoints (`harnessEgress`) in direct mode.
pub fn network_policy(spec: &GatewaySpec, c: &GatewayConfig) -> NetworkPolicy {
    let mut from = Vec::new();
    let ns_labels = &c.approved_client_namespace_labels;
    let pod_labels = &c.approved_client_pod_labels;
    // An empty selector would mean "everything", so a peer is only made from
    // labels that were actually configured.
    if !ns_labels.is_empty() || !pod_labels.is_empty() {
        from.push(NetworkPolicyPeer {
            namespace_selector: (!ns_labels.is_empty()).then(|| match_labels(ns_labels)),
            pod_selector: (!pod_labels.is_empty()).then(|| match_labels(pod_labels)),
            ..Default::default()
        });
    }
    for client in &c.clients {
        let ns = BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            client.namespace.clone(),
        )]);
        from.push(NetworkPolicyPeer {
            namespace_selector: Some(match_labels(&ns)),
            pod_selector: Some(match_labels(&client.pod_labels)),
            ..Default::default()
        });
    }
    for cidr in &c.trusted_proxy_cidrs {
        from.push(NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: cidr.clone(),
                except: None,
            }),
            ..Default::default()
        });
    }
    let mut ingress = if from.is_empty() {
        Vec::new()
    } else {
        vec![NetworkPolicyIngressRule {
            from: Some(from),
            ports: Some(vec![tcp_port(c.port)]),
        }]
    };
    // The hub's own Pods: its activation turn and `agents chat` go to the
    // Gateway Pod's address.
    ingress.push(NetworkPolicyIngressRule {
        from: Some(vec![hub_peer(c)]),
        ports: Some(vec![tcp_port(c.port)]),
    });
    let mut dns_ns = BTreeMap::new();
    dns_ns.insert(
        "kubernetes.io/metadata.name".to_string(),
        c.dns.namespace.clone(),
    );
    let mut egress = vec![NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(match_labels(&dns_ns)),
            pod_selector: Some(match_labels(&c.dns.pod_labels)),
            ..Default::default()
        }]),
        ports: Some(
            ["UDP", "TCP"]
                .into_iter()
                .map(|p| NetworkPolicyPort {
                    port: Some(IntOrString::Int(53)),
                    protocol: Some(p.into()),
                    ..Default::default()
                })
                .collect(),
        ),
    }];
    if spec.tunnel_proxy.is_some() {
        egress.push(NetworkPolicyEgressRule {
            to: Some(vec![hub_peer(c)]),
            ports: Some(vec![tcp_port(c.hub.port)]),
        });
    }
    let direct = if spec.tunnel_proxy.is_some() {
        &[][..]
    } else {
        &c.harness_egress[..]
    };
    for rule in direct {
        egress.push(NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: rule.cidr.clone(),
                    except: None,
                }),
                ..Default::default()
            }]),
            ports: Some(rule.ports.iter().map(|&p| tcp_port(p)).collect()),
        });
    }
    NetworkPolicy {
        metadata: meta(&names(&spec.agent).gateway, spec, c),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(&agent_selector(&spec.agent))),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(ingress),
            egress: Some(egress),
        }),
    }
}
