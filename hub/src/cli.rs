//! Command-line front ends.
//!
//! # Layout
//! - `hub.rs`: `clawfed-hub`, the server and its operator commands (tokens,
//!   migrations), which talk to the store directly.
//! - `client.rs`: `clawfed`, the user CLI, a REST client of the hub.
//! - `output.rs`: tables, JSON and YAML output.
//! - `watch.rs`: the watch API's event stream as the CLI reads and shows it.

pub mod client;
pub mod hub;
pub mod output;
pub mod watch;
