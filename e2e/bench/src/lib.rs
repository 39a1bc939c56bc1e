//! What the benchmark programs share.

use std::path::Path;

pub mod cli;
pub mod fleet;
pub mod hubconf;
pub mod kubeapi;
pub mod load;
pub mod pg;
pub mod procfs;
pub mod statements;

/// The environment a bench's `clawfed-hub serve` gets so it migrates its
/// fresh database itself, as every release did on start (on PostgreSQL the
/// hub now refuses a pending migration unless told so); a `--hub-bin` of an
/// older release ignores it.
pub const MIGRATE_ON_START: (&str, &str) = ("CLAWFED_DATABASE_MIGRATE_ON_START", "true");

/// "release", "debug" or "custom" for a binary in a cargo target dir.
pub fn profile_of(bin: &Path) -> &'static str {
    match bin
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
    {
        Some("release") => "release",
        Some("debug") => "debug",
        _ => "custom",
    }
}

/// `clawfed-hub <args>` on SQLite in `dir` (its database, its CA), every
/// listener on an ephemeral loopback port, logging warnings.
pub fn sqlite_hub(hub_bin: &Path, dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(hub_bin);
    c.args(args)
        .env_remove("CLAWFED_CONFIG")
        .env(
            "CLAWFED_DATABASE_URL",
            format!("sqlite://{}", dir.join("hub.db").display()),
        )
        .env("CLAWFED_LINK_CA_DIR", dir.join("ca"))
        .env("CLAWFED_LOG", "warn");
    for var in [
        "CLAWFED_REST_ADDR",
        "CLAWFED_GRPC_ADDR",
        "CLAWFED_METRICS_ADDR",
        "CLAWFED_LINK_ADDR",
        "CLAWFED_TUNNEL_ADDR",
    ] {
        c.env(var, "127.0.0.1:0");
    }
    c
}

/// The hub binary a bench runs: `given`, else `clawfed-hub` next to the
/// bench's own binary (same profile); an error naming the build command
/// when it is missing.
pub fn hub_bin(given: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    hub_bin_built_by(given, "cargo build [--release] -p clawfed-hub")
}

/// [`hub_bin`] for a bench whose figures want the hub built by `build`
/// (the command the missing-binary error names).
pub fn hub_bin_built_by(
    given: Option<std::path::PathBuf>,
    build: &str,
) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let bin = match given {
        Some(b) => b,
        None => std::env::current_exe()?
            .parent()
            .context("bench dir")?
            .join("clawfed-hub"),
    };
    anyhow::ensure!(bin.exists(), "{} not found: {build}", bin.display());
    Ok(bin)
}

/// The run's working directory: `keep` (created if missing), kept after the
/// run, else a temp dir removed when the returned guard drops.
pub fn kept_or_temp_dir(
    keep: Option<&Path>,
) -> anyhow::Result<(std::path::PathBuf, Option<tempfile::TempDir>)> {
    match keep {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            Ok((d.to_owned(), None))
        }
        None => {
            let tmp = tempfile::tempdir()?;
            Ok((tmp.path().to_owned(), Some(tmp)))
        }
    }
}

/// The `p`th percentile (0-100) of `sorted` (nearest rank); NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
