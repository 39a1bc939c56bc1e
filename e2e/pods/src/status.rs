//! The Pod status the runner reports, built from what it observed. Pure.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The node's address as the runner reports it (the apiserver never dials
/// it: the Pod proxy dials the Pod IP).
pub const HOST_IP: &str = "127.0.0.1";

/// The container's state as the runner sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Not started (or waiting to restart): a kubelet-style reason.
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started_at: Timestamp,
    },
}

/// How the previous run ended (kept after a restart).
#[derive(Debug, Clone, PartialEq)]
pub struct LastExit {
    pub exit_code: i32,
    pub reason: String,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub pod_ip: Ipv4Addr,
    pub start_time: Timestamp,
    pub container: String,
    pub image: String,
    pub state: State,
    pub ready: bool,
    /// When `ready` last changed (the Ready condition's transition time).
    pub ready_changed: Timestamp,
    /// Why the container is not ready (probe result), shown on Ready=False.
    pub not_ready_message: Option<String>,
    pub restart_count: i32,
    pub last_exit: Option<LastExit>,
    pub pid: Option<u32>,
}

fn condition(type_: &str, status: bool, at: Timestamp) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        last_transition_time: Some(Time(at)),
        ..Default::default()
    }
}

pub fn pod_status(o: &Observed) -> PodStatus {
    let started = matches!(o.state, State::Running { .. });
    let ready = started && o.ready;
    let mut ready_condition = condition("Ready", ready, o.ready_changed);
    let mut containers_ready = condition("ContainersReady", ready, o.ready_changed);
    if !ready {
        for c in [&mut ready_condition, &mut containers_ready] {
            c.reason = Some("ContainersNotReady".to_string());
            c.message = Some(format!(
                "containers with unready status: [{}]{}",
                o.container,
                o.not_ready_message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
        }
    }
    let state = match &o.state {
        State::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: Some(message.clone()),
            }),
            ..Default::default()
        },
        State::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(*started_at)),
            }),
            ..Default::default()
        },
    };
    let last_state = o.last_exit.as_ref().map(|e| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: e.exit_code,
            reason: Some(e.reason.clone()),
            started_at: Some(Time(e.started_at)),
            finished_at: Some(Time(e.finished_at)),
            ..Default::default()
        }),
        ..Default::default()
    });
    let ip = o.pod_ip.to_string();
    PodStatus {
        // A container that never started keeps the Pod Pending, as a kubelet
        // does on a configuration error.
        phase: Some(
            if started || o.restart_count > 0 {
                "Running"
            } else {
                "Pending"
            }
            .to_string(),
        ),
        conditions: Some(vec![
            condition("PodScheduled", true, o.start_time),
            condition("Initialized", true, o.start_time),
            containers_ready,
            ready_condition,
        ]),
        container_statuses: Some(vec![ContainerStatus {
            name: o.container.clone(),
            image: o.image.clone(),
            image_id: o.image.clone(),
            container_id: o.pid.map(|p| format!("clawfed-podrunner://{p}")),
            ready,
            started: Some(started),
            restart_count: o.restart_count,
            state: Some(state),
            last_state,
            ..Default::default()
        }]),
        host_ip: Some(HOST_IP.to_string()),
        host_ips: Some(vec![HostIP {
            ip: HOST_IP.to_string(),
        }]),
        pod_ip: Some(ip.clone()),
        pod_ips: Some(vec![PodIP { ip }]),
        start_time: Some(Time(o.start_time)),
        ..Default::default()
    }
}

/// The merge patch for `pods/status` (lists are replaced as a whole: the
/// runner owns the conditions and container statuses of its Pods).
pub fn patch(o: &Observed) -> serde_json::Value {
    serde_json::json!({ "status": pod_status(o) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed() -> Observed {
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        Observed {
            pod_ip: Ipv4Addr::new(198, 18, 176, 9),
            start_time: t,
            container: "harness".into(),
            image: "clawfed.test/harness-standin:test".into(),
            state: State::Running { started_at: t },
            ready: false,
            ready_changed: t,
            not_ready_message: Some("readiness probe: http status 503".into()),
            restart_count: 0,
            last_exit: None,
            pid: Some(42),
        }
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    #[test]
    fn running_but_unready_says_why() {
        let s = pod_status(&observed());
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("198.18.176.9"));
        assert_eq!(cond(&s, "Ready").status, "False");
        assert!(
            cond(&s, "Ready")
                .message
                .as_deref()
                .unwrap()
                .ends_with("[harness]: readiness probe: http status 503")
        );
        assert_eq!(cond(&s, "PodScheduled").status, "True");
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert!(!c.ready);
        assert_eq!(c.started, Some(true));
    }

    #[test]
    fn ready_only_while_running() {
        let mut o = observed();
        o.ready = true;
        assert_eq!(cond(&pod_status(&o), "Ready").status, "True");
        assert_eq!(cond(&pod_status(&o), "ContainersReady").status, "True");
        o.state = State::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: "exited 1".into(),
        };
        o.restart_count = 1;
        let s = pod_status(&o);
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        o.restart_count = 0;
        assert_eq!(pod_status(&o).phase.as_deref(), Some("Pending"));
    }
}
