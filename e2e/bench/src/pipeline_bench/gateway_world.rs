//! The control cluster's side of a run with Gateways on: deploy/hub
//! installed, the Gateway PVs, and their cleanup.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use clawfed_hub::gateway::Gateways;
use clawfed_tests::control_env;
use clawfed_tests::kube_env::{self, TestCluster};

/// The control cluster's side of a run with Gateways on.
pub(super) struct GatewayWorld {
    pub(super) control: TestCluster,
    /// The same Gateway room as the admin, for cleanup after the hub stopped.
    admin: Gateways,
    /// (tenant, agent) of every Gateway this run may have made.
    made: Mutex<Vec<String>>,
    /// The pre-bound PVs of their PVCs.
    pvs: Mutex<Vec<String>>,
}

impl GatewayWorld {
    /// Installs deploy/hub (RBAC, the tests' StorageClass, the edge Gateway)
    /// in `control` and returns the world and the hub's Gateway runtime,
    /// acting as the hub's ServiceAccount.
    pub(super) async fn start(control: &str) -> Result<(Arc<Self>, Gateways)> {
        let control = kube_env::cluster(control)
            .await
            .with_context(|| format!("control cluster {control} (e2e/cluster.sh up {control})"))?;
        control_env::install_hub(&control).await?;
        let runtime = Gateways::new(
            control_env::hub_client(&control).await?,
            control_env::gateway_config(),
        )?;
        let admin = Gateways::new(control.admin(), control_env::gateway_config())?;
        let world = Arc::new(Self {
            control,
            admin,
            made: Mutex::default(),
            pvs: Mutex::default(),
        });
        Ok((world, runtime))
    }

    /// The PV the Agent's Gateway PVC binds to (the test clusters have no
    /// provisioner); records both for cleanup.
    pub(super) async fn prepare(&self, namespace_id: &str, agent: &str) -> Result<()> {
        {
            let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
            if !made.iter().any(|id| id == namespace_id) {
                made.push(namespace_id.to_owned());
            }
        }
        let pv = control_env::volume_for(
            &self.control.admin(),
            &control_env::gateway_ns(namespace_id),
            agent,
        )
        .await?;
        self.pvs.lock().unwrap_or_else(|p| p.into_inner()).push(pv);
        Ok(())
    }

    /// Deletes every tenant's Gateway namespace (with its Gateways) and
    /// the PVs.
    pub(super) async fn cleanup(&self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()));
        for namespace_id in made {
            if let Err(e) = self.admin.delete_namespace(&namespace_id).await {
                eprintln!("deleting the Gateway namespace of {namespace_id}: {e}");
            }
        }
        let pvs = std::mem::take(&mut *self.pvs.lock().unwrap_or_else(|p| p.into_inner()));
        for pv in pvs {
            control_env::delete_volume(&self.control.admin(), &pv).await;
        }
    }
}
