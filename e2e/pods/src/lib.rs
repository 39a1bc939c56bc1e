//! Test-only: real processes behind the test clusters' Pods.
//!
//! kwok makes Pods Running and Ready with nothing behind them. For Pods of
//! the project's stand-in images (`clawfed.test/<name>-standin`) and of the
//! real OpenClaw runtime (`clawfed.test/openclaw:<version>`) the pod runner
//! acts as their kubelet instead: it starts the process inside the Pod
//! network made by `e2e/podnet.sh`, on a Pod IP of its range, with the
//! Pod's env and Secret/ConfigMap values (and, for the runtime, its own
//! network namespace and its volumes mounted), reports Ready only after
//! the readiness probe passes, and stops it when the Pod goes.
//!
//! # Layout
//! - [`net`]: Pod CIDR, IP allocator, the route check (pure, plus one `ip -j route`)
//! - [`podspec`]: what a Pod asks for: program, port, probe, grace (pure)
//! - [`runtime`]: the real OpenClaw install of `e2e/openclaw.sh`
//! - [`sandbox`]: the runtime's network namespace and bind mounts
//! - [`env`]: env and volume files from the Pod and its Secrets/ConfigMaps
//! - [`status`]: the Pod status the runner reports (pure)
//! - [`probe`]: one readiness probe attempt
//! - [`provisioner`]: hostPath volumes for class-less claims, reclaimed with them
//! - [`process`]: start in the namespace, SIGTERM/SIGKILL, stale cleanup
//! - [`supervisor`]: one Pod's life: start, probe, report, restart, stop
//! - [`runner`]: the watch, the IPs, one supervisor per Pod
//! - [`standin`]: the stand-ins' HTTP servers (`harness`, `gateway`)

pub mod env;
pub mod net;
pub mod podspec;
pub mod probe;
pub mod process;
pub mod provisioner;
pub mod runner;
pub mod runtime;
pub mod sandbox;
pub mod standin;
pub mod status;
pub mod supervisor;
