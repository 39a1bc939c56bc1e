//! What a test made in the test clusters (data-plane namespaces, Gateway
//! namespaces, volumes), removed when the test ends, also after a failure.

use std::time::Duration;

use anyhow::Result;
use clawfed_hub::gateway::Gateways;
use clawfed_hub::model::Namespace;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::DeleteParams;
use kube::{Api, Client};

use crate::control_env::{self, gateway_ns};
use crate::kube_env;

/// What a test made in the clusters; removed on drop (also after a
/// failure), on a runtime of its own.
#[derive(Default)]
pub struct Cleanup {
    /// Data-plane namespaces in exec-a.
    pub exec_namespaces: Vec<String>,
    /// Tenants (namespace ids) whose Gateway namespace goes.
    pub gateways: Vec<String>,
    /// PersistentVolumes made in control.
    pub control_pvs: Vec<String>,
    /// PersistentVolumes made in exec-a.
    pub exec_pvs: Vec<String>,
}

impl Cleanup {
    /// Registers what an Agent of tenant `ns` makes: its data-plane
    /// namespace in exec-a, its Gateway objects and the Gateway's PV (made
    /// here) in control.
    pub async fn track(&mut self, control: &Client, ns: &Namespace, agent: &str) -> Result<()> {
        self.exec_namespaces.push(ns.data_plane_namespace.clone());
        self.gateway(control, ns, agent).await
    }

    /// Registers a dedicated Agent's Gateway namespace and its Gateway
    /// volume in control (its claim names the test StorageClass, which the
    /// provisioner leaves alone).
    pub async fn gateway(&mut self, control: &Client, ns: &Namespace, agent: &str) -> Result<()> {
        if !self.gateways.contains(&ns.id) {
            self.gateways.push(ns.id.clone());
        }
        self.control_pvs
            .push(control_env::volume_for(control, &gateway_ns(&ns.id), agent).await?);
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.exec_namespaces.is_empty()
            && self.gateways.is_empty()
            && self.control_pvs.is_empty()
            && self.exec_pvs.is_empty()
    }

    /// Removes everything registered now (the test asserts it went).
    pub async fn run(&mut self) -> Result<()> {
        let control = kube_env::cluster("control").await?;
        let exec_a = kube_env::cluster("exec-a").await?;
        let g = Gateways::new(control.admin(), control_env::gateway_config())?;
        for namespace_id in self.gateways.drain(..) {
            if let Err(e) = g.delete_namespace(&namespace_id).await {
                eprintln!("cleanup: gateway namespace of {namespace_id}: {e}");
            }
        }
        for pv in self.control_pvs.drain(..) {
            control_env::delete_volume(&control.admin(), &pv).await;
        }
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(exec_a.admin());
        for ns in self.exec_namespaces.drain(..) {
            match namespaces.delete(&ns, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => eprintln!("cleanup: namespace {ns}: {e}"),
            }
        }
        for pv in self.exec_pvs.drain(..) {
            let _ = Api::<PersistentVolume>::all(exec_a.admin())
                .delete(&pv, &DeleteParams::background())
                .await;
        }
        Ok(())
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.is_empty() {
            return;
        }
        let mut me = std::mem::take(self);
        on_own_runtime(Duration::from_secs(90), async move { me.run().await });
    }
}

/// Runs `cleanup` to its end (or `within`) on a runtime of its own, on a
/// thread of its own: from a `Drop`, which may run inside a test's runtime
/// or while a failed test unwinds. Failures are printed, never raised.
pub fn on_own_runtime<F>(within: Duration, cleanup: F)
where
    F: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("cleanup runtime");
        rt.block_on(async {
            match tokio::time::timeout(within, cleanup).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("cleanup failed: {e:#}"),
                Err(_) => eprintln!("cleanup timed out"),
            }
        });
    })
    .join();
}
