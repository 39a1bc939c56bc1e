//! Command-line front ends.
//!
//! # Layout
//! - `hub.rs`: `clawfed-hub`, the server and its operator commands (tokens,
//!   migrations), which talk to the store directly.
//! - `client.rs`: `clawfed`, the user CLI, a REST client of the hub
//!   ([`crate::client::HubClient`]).
//! - `args.rs`: its flags, subcommands and the files and values they name.
//! - `output.rs`: tables, JSON and YAML output.
//! - `watch.rs`: a watch event as the CLI shows it.

mod args;
pub mod client;
mod drain;
pub mod hub;
pub mod output;
mod version;
pub mod watch;
