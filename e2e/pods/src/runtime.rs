//! The real OpenClaw runtime as `e2e/openclaw.sh` installs it: Node 24 and
//! the `openclaw` package of one version, run for Pods of image
//! `clawfed.test/openclaw:<that version>`; and the Codex CLI it carries
//! (`@openai/codex`, the bundled Codex plugin's dependency), run for Pods of
//! image `clawfed.test/codex:<its version>`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The dir is not a finished install.
    #[error("{0} is not an openclaw install of e2e/openclaw.sh (no .complete)")]
    Incomplete(PathBuf),
    /// Its package.json cannot be read.
    #[error("reading the openclaw version from {0}")]
    Version(PathBuf, #[source] std::io::Error),
    /// Its package.json has no version.
    #[error("{0} names no version")]
    NoVersion(PathBuf),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One finished install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenClawInstall {
    pub dir: PathBuf,
    pub version: String,
    /// The Codex CLI's version, when the install carries it.
    pub codex_version: Option<String>,
}

/// Where the install keeps the Codex CLI's package and native binary.
const CODEX_PACKAGE: &str = "app/node_modules/@openai/codex/package.json";
const CODEX_BINARY: &str =
    "app/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex";

/// The Codex image's entrypoint, as a runtime image's would be: its
/// `CODEX_HOME` made (Codex refuses one that does not exist, and on a new
/// claim it does not); the app-server authenticates to the model API with
/// the account there, which `codex login` writes from the Harness
/// credential (`CLAWFED_MODEL_API_KEY`, by secretKeyRef); then it runs codex with
/// the Pod's arguments.
pub const CODEX_ENTRYPOINT: &str = r#"set -e
if [ -n "${CODEX_HOME:-}" ]; then mkdir -p "$CODEX_HOME"; fi
if [ -n "${CLAWFED_MODEL_API_KEY:-}" ]; then
  printenv CLAWFED_MODEL_API_KEY | codex login --with-api-key >/dev/null
fi
exec codex "$@""#;

fn package_version(manifest: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(manifest).map_err(|e| Error::Version(manifest.to_owned(), e))?;
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("version")?.as_str().map(str::to_owned))
        .ok_or_else(|| Error::NoVersion(manifest.to_owned()))
}

/// PATH of the image: Node 24 first, then the system's (the runtime spawns
/// `node` and shell tools by name).
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl OpenClawInstall {
    /// Opens the install in `dir` (as printed by `e2e/openclaw.sh`).
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.join(".complete").is_file() {
            return Err(Error::Incomplete(dir.to_path_buf()));
        }
        let version = package_version(&dir.join("app/node_modules/openclaw/package.json"))?;
        let codex_version = dir
            .join(CODEX_BINARY)
            .is_file()
            .then(|| package_version(&dir.join(CODEX_PACKAGE)))
            .transpose()?;
        Ok(Self {
            dir: dir.to_path_buf(),
            version,
            codex_version,
        })
    }

    /// `sh -c <CODEX_ENTRYPOINT> codex <args>`.
    pub fn codex_argv(&self, args: &[String]) -> Vec<OsString> {
        let mut argv = vec![
            OsString::from("/bin/sh"),
            "-c".into(),
            CODEX_ENTRYPOINT.into(),
            "codex".into(),
        ];
        argv.extend(args.iter().map(OsString::from));
        argv
    }

    /// The Node 24 binary.
    pub fn node(&self) -> PathBuf {
        self.dir.join("node/bin/node")
    }

    /// `node <openclaw.mjs> <args>`.
    pub fn argv(&self, args: &[String]) -> Vec<OsString> {
        let mut argv = vec![
            self.node().into_os_string(),
            self.dir
                .join("app/node_modules/openclaw/openclaw.mjs")
                .into_os_string(),
        ];
        argv.extend(args.iter().map(OsString::from));
        argv
    }

    /// The image's environment, under the Pod's own (the Pod's wins, as
    /// with a container image's `ENV`).
    pub fn image_env(&self, pod_env: &mut Vec<(String, String)>) {
        let node_bin = self.dir.join("node/bin");
        let codex_bin = self.dir.join(CODEX_BINARY);
        let codex_dir = codex_bin.parent().unwrap_or(&self.dir);
        let defaults = [
            (
                "PATH".to_string(),
                format!(
                    "{}:{}:{SYSTEM_PATH}",
                    node_bin.display(),
                    codex_dir.display()
                ),
            ),
            ("HOME".to_string(), "/tmp".to_string()),
        ];
        for (k, v) in defaults {
            if !pod_env.iter().any(|(name, _)| *name == k) {
                pod_env.push((k, v));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_a_finished_install_and_builds_argv_and_env() {
        let dir = std::env::temp_dir().join(format!("clawfed-oc-{}", std::process::id()));
        let pkg = dir.join("app/node_modules/openclaw");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("package.json"), r#"{"version":"2026.9.6"}"#).unwrap();
        assert!(matches!(
            OpenClawInstall::open(&dir),
            Err(Error::Incomplete(_))
        ));
        std::fs::write(dir.join(".complete"), "").unwrap();
        let i = OpenClawInstall::open(&dir).unwrap();
        assert_eq!(i.version, "2026.9.6");
        assert_eq!(i.codex_version, None, "no Codex CLI in this install");
        let codex = i.codex_argv(&["app-server".into()]);
        assert_eq!(codex[0], "/bin/sh");
        assert_eq!(codex[3..], [OsString::from("codex"), "app-server".into()]);
        let argv = i.argv(&["gateway".into(), "run".into()]);
        assert_eq!(argv[0], dir.join("node/bin/node").into_os_string());
        assert_eq!(argv[2..], [OsString::from("gateway"), "run".into()]);
        let mut env = vec![("HOME".to_string(), "/var/lib/openclaw".to_string())];
        i.image_env(&mut env);
        assert_eq!(env[0].1, "/var/lib/openclaw", "the Pod's HOME wins");
        assert!(
            env.iter().any(
                |(k, v)| k == "PATH" && v.starts_with(&*dir.join("node/bin").to_string_lossy())
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
