//! Execution settings of the spoke.

use std::collections::BTreeMap;
use std::time::Duration;

/// Where the cluster's DNS Pods run: the only egress every data-plane Pod gets
/// by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsTarget {
    /// Namespace of the DNS Pods.
    pub namespace: String,
    /// Labels of the DNS Pods.
    pub pod_labels: BTreeMap<String, String>,
}

impl Default for DnsTarget {
    fn default() -> Self {
        DnsTarget {
            namespace: "kube-system".into(),
            pod_labels: BTreeMap::from([("k8s-app".into(), "kube-dns".into())]),
        }
    }
}

/// Settings of the executor.
#[derive(Debug, Clone)]
pub struct SpokeConfig {
    /// Namespace of the spoke's own ServiceAccount.
    pub service_account_namespace: String,
    /// Labels of the spoke's own Pods: Harness NetworkPolicies admit them
    /// (and only them) on the Harness port, the tunnel's last hop.
    pub pod_labels: BTreeMap<String, String>,
    /// Name of the spoke's own ServiceAccount; each data-plane namespace gets a
    /// RoleBinding of [`SpokeConfig::tenant_cluster_role`] to it.
    pub service_account_name: String,
    /// The ClusterRole (deploy/spoke) granting the spoke its rights inside
    /// data-plane namespaces, bound per namespace, never cluster-wide.
    pub tenant_cluster_role: String,
    /// The cluster's DNS Pods.
    pub dns: DnsTarget,
    /// How long stop waits for a deleted Harness to be gone.
    pub delete_timeout: Duration,
    /// How long the spoke retries `Forbidden` right after binding its tenant
    /// role in a new namespace (the authorizer's cache catches up).
    pub rbac_settle_timeout: Duration,
    /// How long work answered `Forbidden` keeps being retried before the
    /// refusal is reported as final: a kube-apiserver that just restarted
    /// answers 403 until its authorizer's informers have synced, even
    /// after `/readyz` is ok.
    pub forbidden_retry_window: Duration,
    /// Label put on every data-plane namespace for Pod Security admission
    /// (`pod-security.kubernetes.io/enforce`); `None` leaves it unset.
    pub pod_security_level: Option<String>,
    /// What this cluster requires of workload Pods (registry mirror, pull
    /// credentials, proxy, CA bundle): air-gapped clusters.
    pub cluster: crate::apply::environment::ClusterEnvironment,
}

impl Default for SpokeConfig {
    fn default() -> Self {
        SpokeConfig {
            service_account_namespace: "clawfed-system".into(),
            service_account_name: "clawfed-spoke".into(),
            pod_labels: BTreeMap::from([("app.kubernetes.io/name".into(), "clawfed-spoke".into())]),
            tenant_cluster_role: "clawfed-spoke-tenant".into(),
            dns: DnsTarget::default(),
            delete_timeout: Duration::from_secs(60),
            rbac_settle_timeout: Duration::from_secs(10),
            forbidden_retry_window: Duration::from_secs(30),
            pod_security_level: Some("restricted".into()),
            cluster: Default::default(),
        }
    }
}
