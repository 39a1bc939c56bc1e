//! The container images (issue 16 part 2), built for real by
//! `deploy/images/build.sh` with buildah (Debian's package: vfs storage,
//! chroot isolation, no daemon, no network) and checked:
//!
//! - `images.txt` lists each image as `repo:tag@sha256:…`, and that digest
//!   is the manifest's in the OCI archive the script wrote;
//! - the image config runs as uid/gid 65532, with the binary as entrypoint
//!   and the OCI labels (title, version, licenses);
//! - the root filesystem holds no shell and no setuid file, and is owned by
//!   root except the one state directory;
//! - `buildah run` (the image's own USER and WORKDIR) runs `--version` of
//!   every binary, and the CA and database the hub creates in a volume on
//!   its working directory belong to 65532;
//! - on a read-only root filesystem (a read-only bind of the rootfs, entered
//!   with `unshare --root` as uid 65532) the hub creates its CA and its
//!   SQLite database in a volume on /var/lib/clawfed and fails without one;
//!   the spoke starts its CLI without any volume.
//!
//! The images are built from this target dir's debug binaries, which are
//! dynamically linked (the script copies the libraries they load): a
//! release build for the static musl images is too slow for every CI run;
//! the Containerfiles and checks are the same for both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};
use clawfed_tests::procs;
use sha2::{Digest, Sha256};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// Runs a command; the output whatever its exit status.
fn run(command: &mut Command) -> Result<Output> {
    command
        .output()
        .with_context(|| format!("running {command:?}"))
}

/// Runs a command that must succeed; its stdout.
fn ok(command: &mut Command) -> Result<String> {
    let out = run(command)?;
    ensure!(
        out.status.success(),
        "{command:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

struct Buildah {
    out: PathBuf,
}

impl Buildah {
    fn cmd(&self) -> Command {
        let mut c = Command::new("buildah");
        c.arg("--root")
            .arg(self.out.join("storage"))
            .arg("--runroot")
            .arg(self.out.join("run"))
            .args(["--storage-driver", "vfs"]);
        c
    }
}

#[test]
fn images_build_run_non_root_and_on_a_read_only_root() -> Result<()> {
    let binaries = procs::bin("clawfed-hub")?
        .parent()
        .context("binaries dir")?
        .to_owned();
    let work = tempfile::tempdir()?;
    let out = work.path().join("images");
    ok(Command::new(repo_root().join("deploy/images/build.sh"))
        .arg("--binaries")
        .arg(&binaries)
        .arg("--out")
        .arg(&out)
        .args(["--tag", "test"]))?;
    let buildah = Buildah { out: out.clone() };

    let list = std::fs::read_to_string(out.join("images.txt"))?;
    let images: BTreeMap<&str, &str> = list
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let digest = l.split_once('@').map_or("", |(_, d)| d);
            (l.split_once('@').map_or(l, |(r, _)| r), digest)
        })
        .collect();
    assert_eq!(
        images.keys().copied().collect::<Vec<_>>(),
        [
            "localhost/clawfed/clawfed-hub:test",
            "localhost/clawfed/clawfed-spoke:test"
        ],
        "{list}"
    );
    for (name, binaries, state) in [
        (
            "clawfed-hub",
            &["clawfed", "clawfed-hub"][..],
            "/var/lib/clawfed",
        ),
        (
            "clawfed-spoke",
            &["clawfed-spoke"][..],
            "/var/lib/clawfed-spoke",
        ),
    ] {
        let reference = format!("localhost/clawfed/{name}:test");
        let digest = images[reference.as_str()];
        check_archive_digest(&out.join(format!("{name}.oci.tar")), digest)
            .with_context(|| format!("{name}: archive"))?;
        check_config(&buildah, &reference, name).with_context(|| format!("{name}: config"))?;
        let container = ok(buildah.cmd().args(["from", "--quiet", &reference]))?
            .trim()
            .to_owned();
        let rootfs = PathBuf::from(ok(buildah.cmd().args(["mount", &container]))?.trim());
        check_rootfs(&rootfs, binaries, state).with_context(|| format!("{name}: rootfs"))?;
        for binary in binaries {
            let version = ok(buildah.cmd().args([
                "run",
                "--isolation",
                "chroot",
                &container,
                "--",
                &format!("/usr/local/bin/{binary}"),
                "--version",
            ]))?;
            assert_eq!(version.trim(), format!("{binary} {VERSION}"));
        }
        if name == "clawfed-hub" {
            // The image's own USER and WORKDIR: the CA and the database
            // land in the volume on the state directory, owned by 65532.
            let volume = work.path().join("hub-volume");
            std::fs::create_dir(&volume)?;
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777))?;
            for command in [&["cluster", "ca"][..], &["migrate"][..]] {
                ok(buildah
                    .cmd()
                    .args(["run", "--isolation", "chroot", "--volume"])
                    .arg(format!("{}:/var/lib/clawfed", volume.display()))
                    .args([&container, "--", "/usr/local/bin/clawfed-hub"])
                    .args(command))?;
            }
            for file in ["clawfed-ca/ca.crt", "clawfed.db"] {
                let path = volume.join(file);
                let meta = std::fs::metadata(&path).with_context(|| path.display().to_string())?;
                assert_eq!((meta.uid(), meta.gid()), (65532, 65532), "{file}");
            }
            // A fresh container for the read-only run.
            ok(buildah.cmd().args(["rm", &container]))?;
            let container = ok(buildah.cmd().args(["from", "--quiet", &reference]))?
                .trim()
                .to_owned();
            let rootfs = PathBuf::from(ok(buildah.cmd().args(["mount", &container]))?.trim());
            check_hub_read_only(&rootfs)?;
        } else {
            check_spoke_read_only(&rootfs)?;
        }
    }
    Ok(())
}

/// The digest in images.txt is the one manifest of the OCI archive, and
/// that manifest's bytes hash to it.
fn check_archive_digest(archive: &Path, digest: &str) -> Result<()> {
    let hex = digest.strip_prefix("sha256:").context("digest is sha256")?;
    ensure!(hex.len() == 64, "digest {digest}");
    let index: serde_json::Value = serde_json::from_str(&ok(Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg("index.json"))?)?;
    let manifests = index["manifests"].as_array().context("index manifests")?;
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(manifests[0]["digest"].as_str(), Some(digest));
    let blob = run(Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(format!("blobs/sha256/{hex}")))?;
    ensure!(
        blob.status.success(),
        "no manifest blob {hex} in {archive:?}"
    );
    assert_eq!(hex::encode(Sha256::digest(&blob.stdout)), hex);
    Ok(())
}

fn check_config(buildah: &Buildah, reference: &str, name: &str) -> Result<()> {
    let inspect: serde_json::Value = serde_json::from_str(&ok(buildah
        .cmd()
        .args(["inspect", "--type", "image", reference]))?)?;
    let config = &inspect["OCIv1"]["config"];
    assert_eq!(config["User"], "65532:65532", "{config}");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!([format!("/usr/local/bin/{name}")])
    );
    let labels = &config["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], name);
    assert_eq!(labels["org.opencontainers.image.version"], VERSION);
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert!(
        labels["org.opencontainers.image.revision"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{labels}"
    );
    Ok(())
}

/// No shell, no setuid or setgid file, root-owned but for the state dir,
/// exactly the expected binaries.
fn check_rootfs(rootfs: &Path, binaries: &[&str], state: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    for shell in [
        "bin/sh",
        "usr/bin/sh",
        "bin/bash",
        "bin/busybox",
        "usr/bin/env",
    ] {
        ensure!(!rootfs.join(shell).exists(), "{shell} exists in the image");
    }
    let mut bins: Vec<String> = std::fs::read_dir(rootfs.join("usr/local/bin"))?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    bins.sort();
    assert_eq!(bins, binaries);
    let state = rootfs.join(state.trim_start_matches('/'));
    let mut stack = vec![rootfs.to_owned()];
    let mut seen = 0;
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        seen += 1;
        ensure!(
            meta.mode() & 0o6000 == 0,
            "{} is setuid/setgid",
            path.display()
        );
        let owner = if path.starts_with(&state) { 65532 } else { 0 };
        ensure!(
            (meta.uid(), meta.gid()) == (owner, owner),
            "{} is owned by {}:{}, not {owner}",
            path.display(),
            meta.uid(),
            meta.gid()
        );
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    ensure!(seen > 5, "rootfs {} looks empty", rootfs.display());
    Ok(())
}

/// A shell script run in a private mount namespace with the image's rootfs
/// bound read-only at `$1`, `/dev` and `/proc` mounted, and `run` entering
/// it as 65532 (like a Pod with `readOnlyRootFilesystem: true`).
fn read_only(rootfs: &Path, script: &str) -> Result<Output> {
    let prelude = r#"set -eu
m="$1"
mount --bind "$m" "$m"
mount -o remount,bind,ro "$m"
mount --bind /dev "$m/dev"
mount -t proc proc "$m/proc"
run() { wd="$1"; shift; unshare --root="$m" --wd="$wd" --setuid 65532 --setgid 65532 "$@"; }
"#;
    run(Command::new("unshare")
        .args(["--mount", "--fork", "sh", "-c"])
        .arg(format!("{prelude}{script}"))
        .arg("sh")
        .arg(rootfs))
}

fn check_hub_read_only(rootfs: &Path) -> Result<()> {
    // Without a volume the root filesystem refuses the database.
    let refused = read_only(
        rootfs,
        "run /var/lib/clawfed /usr/local/bin/clawfed-hub migrate",
    )?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(
        !refused.status.success(),
        "migrate wrote to a read-only root"
    );
    ensure!(stderr.contains("unable to open database file"), "{stderr}");
    // With one writable volume at /var/lib/clawfed: the CA certificate, the
    // secrets key and SQLite (which holds the CA key, sealed) land there,
    // owned by 65532.
    let volume = read_only(
        rootfs,
        r#"mount -t tmpfs -o mode=0755,uid=65532,gid=65532 tmpfs "$m/var/lib/clawfed"
run /var/lib/clawfed /usr/local/bin/clawfed-hub cluster ca
run /var/lib/clawfed /usr/local/bin/clawfed-hub migrate
cd "$m/var/lib/clawfed" && find . -mindepth 1 -printf '%p %U:%G\n' | sort
"#,
    )?;
    let stdout = String::from_utf8_lossy(&volume.stdout);
    if !volume.status.success() {
        bail!(
            "hub on a read-only root with a volume failed: {stdout}\n{}",
            String::from_utf8_lossy(&volume.stderr)
        );
    }
    assert!(stdout.contains("-----BEGIN CERTIFICATE-----"), "{stdout}");
    // `cluster ca` opened SQLite first, which migrates it on start: the
    // migrate that follows finds the schema current.
    assert!(
        stdout.contains("no pending migrations; schema at"),
        "{stdout}"
    );
    for path in [
        "./clawfed-ca/ca.crt",
        "./clawfed-ca.secrets.key",
        "./clawfed.db",
    ] {
        assert!(
            stdout.contains(&format!("{path} 65532:65532")),
            "{path} not in the volume as 65532: {stdout}"
        );
    }
    Ok(())
}

fn check_spoke_read_only(rootfs: &Path) -> Result<()> {
    let help = read_only(
        rootfs,
        "run /var/lib/clawfed-spoke /usr/local/bin/clawfed-spoke --help",
    )?;
    let stdout = String::from_utf8_lossy(&help.stdout);
    ensure!(
        help.status.success() && stdout.contains("--identity-secret"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&help.stderr)
    );
    Ok(())
}
