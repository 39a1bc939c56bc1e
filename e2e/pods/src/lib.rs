//! Test-only: real processes behind the test clusters' Pods.
//!
//! kwok makes Pods Running and Ready with nothing behind them. For Pods of
//! the project's stand-in images (`clawfed.test/<name>-standin`) the pod
//! runner acts as their kubelet instead: it starts the stand-in inside the
//! Pod network namespace made by `e2e/podnet.sh`, bound to a Pod IP of its
//! range, with the Pod's env and Secret/ConfigMap values, reports Ready
//! only after the readiness probe passes, and stops it when the Pod goes.
//!
//! # Layout
//! - [`net`]: Pod CIDR, IP allocator, the route check (pure, plus one `ip -j route`)
//! - [`podspec`]: what a Pod asks for: binary, port, probe, grace (pure)
//! - [`env`]: env and volume files from the Pod and its Secrets/ConfigMaps
//! - [`status`]: the Pod status the runner reports (pure)
//! - [`probe`]: one readiness probe attempt
//! - [`process`]: start in the namespace, SIGTERM/SIGKILL, stale cleanup
//! - [`supervisor`]: one Pod's life: start, probe, report, restart, stop
//! - [`runner`]: the watch, the IPs, one supervisor per Pod
//! - [`standin`]: the stand-ins' HTTP servers (`harness`, `gateway`)

pub mod env;
pub mod net;
pub mod podspec;
pub mod probe;
pub mod process;
pub mod runner;
pub mod standin;
pub mod status;
pub mod supervisor;
