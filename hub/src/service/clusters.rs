//! Execution clusters: listed and read (a tenant sees only those its
//! revisions are placed on, without the installation-admin data), enrolled
//! with bootstrap tokens, approved and revoked (cordon and drain: `drain`).

use chrono::Utc;

use super::access::Mutation;
use super::{Result, Service, ServiceError, validate};
use crate::auth::{Action, Principal};
use crate::model::{BootstrapTokenCreated, Cluster, CreateBootstrapToken};
use crate::store::{Effects, NewBootstrapToken, StoreError};

impl Service {
    /// Enrolled clusters: every one for installation admins; for a tenant
    /// token only those its namespace's revisions are placed on, without
    /// the installation-admin data (certificate serials, outbox depth).
    pub async fn list_clusters(&self, p: &Principal) -> Result<Vec<Cluster>> {
        self.check_read(p, Action::Read, None)?;
        let mut clusters = self.store.list_clusters().await?;
        match self.visible_clusters(p).await? {
            None => self.with_outbox_depth(&mut clusters).await?,
            Some(visible) => {
                clusters.retain(|c| visible.contains(&c.name));
                clusters.iter_mut().for_each(tenant_view);
            }
        }
        Ok(clusters)
    }

    /// One cluster; a cluster a tenant may not see is "not found".
    pub async fn get_cluster(&self, p: &Principal, name: &str) -> Result<Cluster> {
        self.check_read(p, Action::Read, None)?;
        let mut cluster = self.store.get_cluster(name).await?;
        match self.visible_clusters(p).await? {
            None => {
                self.with_drain_progress(&mut cluster).await?;
                self.with_outbox_depth(std::slice::from_mut(&mut cluster))
                    .await?
            }
            Some(visible) if visible.contains(&cluster.name) => tenant_view(&mut cluster),
            Some(_) => {
                return Err(StoreError::NotFound {
                    kind: "cluster",
                    name: name.to_owned(),
                }
                .into());
            }
        }
        Ok(cluster)
    }

    /// `None` when the caller sees every cluster (installation admins);
    /// otherwise the names of the clusters its namespace's revisions are
    /// placed on.
    async fn visible_clusters(&self, p: &Principal) -> Result<Option<Vec<String>>> {
        if p.is_installation_admin() {
            return Ok(None);
        }
        Ok(Some(match p.namespace.as_deref() {
            Some(ns) => self.store.placed_clusters(ns).await?,
            None => Vec::new(),
        }))
    }

    async fn with_outbox_depth(&self, clusters: &mut [Cluster]) -> Result<()> {
        let depths: std::collections::HashMap<String, i64> = self
            .store
            .outbox_summary()
            .await?
            .into_iter()
            .map(|s| (s.cluster_id, s.depth))
            .collect();
        for c in clusters.iter_mut() {
            c.outbox_depth = Some(depths.get(&c.id).copied().unwrap_or(0));
        }
        self.with_certificate_expiry(clusters).await
    }

    /// Fills the installation-admin view's certificate expiry.
    async fn with_certificate_expiry(&self, clusters: &mut [Cluster]) -> Result<()> {
        let expiry = self.store.certificate_expiry().await?;
        for c in clusters {
            c.certificate_expires_at = expiry.get(&c.id).copied();
        }
        Ok(())
    }

    /// Creates a single-use, expiring bootstrap token for enrolling
    /// `cluster_name` (installation admins).
    pub async fn create_bootstrap_token(
        &self,
        p: &Principal,
        cluster_name: &str,
        req: CreateBootstrapToken,
    ) -> Result<BootstrapTokenCreated> {
        const MAX_TTL: i64 = 7 * 24 * 3600;
        let m = Mutation::new(
            p,
            "cluster.token.create",
            None,
            format!("clusters/{cluster_name}"),
        );
        self.mutate(Action::Installation, &m, async {
            validate::dns_label("clusterName", cluster_name)?;
            let ttl = req.ttl_seconds.unwrap_or(3600);
            if !(1..=MAX_TTL).contains(&ttl) {
                return Err(ServiceError::InvalidArgument {
                    field: "ttlSeconds".into(),
                    reason: format!("must be between 1 and {MAX_TTL}"),
                });
            }
            let (secret, hash) = crate::link::enroll::mint_bootstrap_token();
            let detail = req.reenroll.then(|| "re-enrollment allowed".to_owned());
            let fx = Effects::audit(m.event("ok", detail));
            let token = self
                .store
                .create_bootstrap_token(
                    &NewBootstrapToken {
                        cluster_name: cluster_name.to_owned(),
                        hash,
                        reenroll: req.reenroll,
                        require_approval: req.require_approval,
                        created_by: p.actor(),
                        expires_at: Utc::now() + chrono::Duration::seconds(ttl),
                    },
                    &fx,
                )
                .await?;
            Ok(BootstrapTokenCreated {
                cluster_name: token.cluster_name,
                token: secret,
                expires_at: token.expires_at,
                reenroll: token.reenroll,
            })
        })
        .await
    }

    /// Approves a spoke's pending enrollment (tokens created with
    /// `requireApproval`).
    pub async fn approve_cluster(&self, p: &Principal, name: &str) -> Result<()> {
        let m = Mutation::new(p, "cluster.approve", None, format!("clusters/{name}"));
        self.authorize(Action::Installation, &m).await?;
        let fx = m.ok();
        let result = match self.store.approve_enrollment(name, Utc::now(), &fx).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ServiceError::NotFound(format!(
                "no enrollment of cluster {name:?} is awaiting approval"
            ))),
            Err(e) => Err(e.into()),
        };
        self.finish(&m, result).await
    }

    /// Revokes a cluster: its certificates are denied and its live stream
    /// closes; coming back needs re-enrollment.
    pub async fn revoke_cluster(&self, p: &Principal, name: &str) -> Result<Cluster> {
        let m = Mutation::new(p, "cluster.revoke", None, format!("clusters/{name}"));
        self.authorize(Action::Installation, &m).await?;
        let fx = m.ok();
        let result = self
            .store
            .revoke_cluster(name, Utc::now(), &fx)
            .await
            .map_err(Into::into);
        self.finish(&m, result).await
    }
}

/// A cluster as a tenant sees it: certificate serials and outbox depth are
/// installation-admin data (they describe other tenants' traffic and the
/// cluster's identity).
fn tenant_view(c: &mut Cluster) {
    c.certificate_serials.clear();
    if let Some(drain) = &mut c.drain {
        drain.progress = None; // names other tenants' Agents
    }
    c.outbox_depth = None;
    c.certificate_expires_at = None;
}
