//! `clawfed-hub bundle` (issue 16 part 4), the real binary: an offline
//! install bundle of a small fixture chart directory (the real charts are
//! written in parallel), the repository's plain manifests and an image
//! list. Its SHA256SUMS verify (by this test and by coreutils'
//! `sha256sum -c`) and a changed file fails them; the tar form holds the
//! same files (read back by GNU tar); the production profile refuses an
//! image without a digest, naming it, and writes nothing; the dev profile
//! allows tags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result};
use clawfed_tests::procs;
use sha2::{Digest, Sha256};

const HUB_DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const SPOKE_DIGEST: &str =
    "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// A chart directory with the hub and spoke charts, as small as Helm takes.
fn fixture_charts(dir: &Path) -> Result<PathBuf> {
    let charts = dir.join("charts");
    for name in ["clawfed-hub", "clawfed-spoke"] {
        let chart = charts.join(name);
        std::fs::create_dir_all(chart.join("templates"))?;
        std::fs::write(
            chart.join("Chart.yaml"),
            format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\nappVersion: 0.1.0\n"),
        )?;
        std::fs::write(
            chart.join("values.yaml"),
            "image:\n  repository: clawfed\n  tag: \"\"\n  digest: \"\"\n",
        )?;
        std::fs::write(
            chart.join("templates/serviceaccount.yaml"),
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ .Chart.Name }}\n",
        )?;
    }
    std::fs::write(charts.join("README.md"), "not a chart, not bundled\n")?;
    Ok(charts)
}

fn bundle(args: &[&std::ffi::OsStr]) -> Result<Output> {
    Command::new(procs::bin("clawfed-hub")?)
        .arg("bundle")
        .args(args)
        .env_remove("CLAWFED_CONFIG")
        .output()
        .context("running clawfed-hub bundle")
}

/// Every file under `dir` (relative path -> bytes).
fn files_under(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        } else {
            let rel = path.strip_prefix(dir)?.to_string_lossy().into_owned();
            files.insert(rel, std::fs::read(&path)?);
        }
    }
    Ok(files)
}

/// SHA256SUMS lists every other file of the bundle, each with its hash.
fn verify_sums(files: &BTreeMap<String, Vec<u8>>) -> Result<(), String> {
    let sums = files.get("SHA256SUMS").ok_or("no SHA256SUMS")?;
    let sums = String::from_utf8_lossy(sums);
    let mut listed = BTreeMap::new();
    for line in sums.lines() {
        let (sum, path) = line.split_once("  ").ok_or(format!("bad line {line:?}"))?;
        listed.insert(path.to_owned(), sum.to_owned());
    }
    let others: Vec<&String> = files.keys().filter(|p| *p != "SHA256SUMS").collect();
    let listed_paths: Vec<&String> = listed.keys().collect();
    if others != listed_paths {
        return Err(format!(
            "files {others:?} but SHA256SUMS lists {listed_paths:?}"
        ));
    }
    for (path, sum) in &listed {
        let actual = hex::encode(Sha256::digest(&files[path]));
        if &actual != sum {
            return Err(format!("{path}: sha256 {actual}, SHA256SUMS says {sum}"));
        }
    }
    Ok(())
}

fn sha256sum_check(dir: &Path) -> Result<Output> {
    Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(dir)
        .output()
        .context("sha256sum")
}

#[test]
fn a_production_bundle_carries_charts_manifests_images_and_verifying_checksums() -> Result<()> {
    let work = tempfile::tempdir()?;
    let charts = fixture_charts(work.path())?;
    let images = work.path().join("images.txt");
    std::fs::write(
        &images,
        format!(
            "# from deploy/images/build.sh\nr.local/clawfed/clawfed-hub:0.1.0@{HUB_DIGEST}\n\
             r.local/clawfed/clawfed-spoke:0.1.0@{SPOKE_DIGEST}\n"
        ),
    )?;
    // Stand-ins for build.sh's OCI archives: carried byte for byte.
    let archives = work.path().join("archives");
    std::fs::create_dir(&archives)?;
    for name in ["clawfed-hub", "clawfed-spoke"] {
        std::fs::write(
            archives.join(format!("{name}.oci.tar")),
            format!("{name} image bytes"),
        )?;
    }
    let deploy = repo_root().join("deploy");
    let out = work.path().join("bundle");
    let tar = work.path().join("bundle.tar");
    let mut outputs = Vec::new();
    for target in [&out, &tar] {
        let output = bundle(&[
            "--charts".as_ref(),
            charts.as_os_str(),
            "--manifests".as_ref(),
            deploy.join("hub").as_os_str(),
            "--manifests".as_ref(),
            deploy.join("spoke").as_os_str(),
            "--images".as_ref(),
            images.as_os_str(),
            "--image-archives".as_ref(),
            archives.as_os_str(),
            "--out".as_ref(),
            target.as_os_str(),
        ])?;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        outputs.push(output);
    }

    let files = files_under(&out)?;
    verify_sums(&files).map_err(anyhow::Error::msg)?;
    let check = sha256sum_check(&out)?;
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    // What it carries: the charts (not the README beside them), every
    // manifest of both directories byte for byte, the image list, values
    // pinning each chart's image by digest.
    assert!(files.contains_key("charts/clawfed-hub/Chart.yaml"));
    assert!(files.contains_key("charts/clawfed-spoke/templates/serviceaccount.yaml"));
    assert!(
        !files.keys().any(|p| p.ends_with("README.md")),
        "{:?}",
        files.keys()
    );
    for dir in ["hub", "spoke"] {
        for entry in std::fs::read_dir(deploy.join(dir))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let name = path.file_name().unwrap().to_string_lossy();
                assert_eq!(
                    files.get(&format!("manifests/{dir}/{name}")),
                    Some(&std::fs::read(&path)?),
                    "manifests/{dir}/{name}"
                );
            }
        }
    }
    assert!(files.contains_key("manifests/spoke/provider-crd.yaml"));
    assert_eq!(
        files.get("images/clawfed-spoke.oci.tar").map(Vec::as_slice),
        Some(&b"clawfed-spoke image bytes"[..])
    );
    assert_eq!(
        String::from_utf8_lossy(&files["images.txt"]),
        format!(
            "r.local/clawfed/clawfed-hub:0.1.0@{HUB_DIGEST}\nr.local/clawfed/clawfed-spoke:0.1.0@{SPOKE_DIGEST}\n"
        )
    );
    for (chart, digest) in [("clawfed-hub", HUB_DIGEST), ("clawfed-spoke", SPOKE_DIGEST)] {
        let values: serde_yaml_ng::Value =
            serde_yaml_ng::from_slice(&files[&format!("values/{chart}.yaml")])?;
        assert_eq!(values["image"]["digest"].as_str(), Some(digest));
        assert_eq!(
            values["image"]["repository"].as_str(),
            Some(format!("r.local/clawfed/{chart}").as_str())
        );
    }
    let meta: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&files["bundle.yaml"])?;
    assert_eq!(meta["profile"].as_str(), Some("production"));

    // The tar form: the same files, read back by GNU tar.
    let unpacked = work.path().join("unpacked");
    std::fs::create_dir(&unpacked)?;
    let untar = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&unpacked)
        .output()?;
    assert!(
        untar.status.success(),
        "{}",
        String::from_utf8_lossy(&untar.stderr)
    );
    assert_eq!(files_under(&unpacked)?, files);
    assert!(sha256sum_check(&unpacked)?.status.success());

    // A changed file fails both checks.
    std::fs::write(out.join("images.txt"), "r.local/evil:latest\n")?;
    let err = verify_sums(&files_under(&out)?).unwrap_err();
    assert!(err.contains("images.txt"), "{err}");
    let check = sha256sum_check(&out)?;
    assert!(!check.status.success());
    assert!(String::from_utf8_lossy(&check.stdout).contains("images.txt: FAILED"));

    // An existing output is never overwritten.
    let again = bundle(&[
        "--charts".as_ref(),
        charts.as_os_str(),
        "--images".as_ref(),
        images.as_os_str(),
        "--manifests".as_ref(),
        deploy.join("hub").as_os_str(),
        "--out".as_ref(),
        tar.as_os_str(),
    ])?;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--out"));
    Ok(())
}

#[test]
fn production_refuses_an_image_without_a_digest_and_dev_allows_it() -> Result<()> {
    let work = tempfile::tempdir()?;
    let charts = fixture_charts(work.path())?;
    let images = work.path().join("images.txt");
    std::fs::write(
        &images,
        format!(
            "r.local/clawfed/clawfed-hub:0.1.0@{HUB_DIGEST}\nr.local/clawfed/clawfed-spoke:0.1.0\n"
        ),
    )?;
    let manifests = repo_root().join("deploy/spoke");
    let out = work.path().join("bundle");
    let args = |profile: Option<&'static str>| {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--charts".into(),
            charts.clone().into(),
            "--manifests".into(),
            manifests.clone().into(),
            "--images".into(),
            images.clone().into(),
            "--out".into(),
            out.clone().into(),
        ];
        if let Some(p) = profile {
            args.extend(["--profile".into(), p.into()]);
        }
        args
    };
    for profile in [None, Some("production")] {
        let args = args(profile);
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let output = bundle(&refs)?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{profile:?}: {stderr}");
        assert!(
            stderr.contains("r.local/clawfed/clawfed-spoke:0.1.0") && stderr.contains("digest"),
            "{profile:?}: {stderr}"
        );
        assert!(!stderr.contains("clawfed-hub:0.1.0"), "{stderr}");
        assert!(!out.exists(), "{profile:?}: a refused bundle wrote {out:?}");
    }

    let args = args(Some("dev"));
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let output = bundle(&refs)?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let files = files_under(&out)?;
    verify_sums(&files).map_err(anyhow::Error::msg)?;
    let spoke: serde_yaml_ng::Value =
        serde_yaml_ng::from_slice(&files["values/clawfed-spoke.yaml"])?;
    assert_eq!(spoke["image"]["tag"].as_str(), Some("0.1.0"));
    assert!(spoke["image"].get("digest").is_none());
    let meta: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&files["bundle.yaml"])?;
    assert_eq!(meta["profile"].as_str(), Some("dev"));
    Ok(())
}

#[test]
fn bad_sources_are_refused_naming_the_flag() -> Result<()> {
    let work = tempfile::tempdir()?;
    let charts = fixture_charts(work.path())?;
    let images = work.path().join("images.txt");
    std::fs::write(&images, format!("r/clawfed-hub@{HUB_DIGEST}\n"))?;
    let manifests = repo_root().join("deploy/hub");
    let case = |charts: &Path, images: &Path, manifests: &Path| -> Result<String> {
        let out = work.path().join("never");
        let output = bundle(&[
            "--charts".as_ref(),
            charts.as_os_str(),
            "--manifests".as_ref(),
            manifests.as_os_str(),
            "--images".as_ref(),
            images.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
        ])?;
        assert!(!output.status.success());
        assert!(!out.exists());
        Ok(String::from_utf8_lossy(&output.stderr).into_owned())
    };
    // A directory under --charts without Chart.yaml.
    std::fs::create_dir(charts.join("typo"))?;
    let err = case(&charts, &images, &manifests)?;
    assert!(
        err.contains("--charts") && err.contains("typo") && err.contains("Chart.yaml"),
        "{err}"
    );
    std::fs::remove_dir(charts.join("typo"))?;
    // A manifest that is not a Kubernetes object.
    let bad_manifests = work.path().join("bad");
    std::fs::create_dir(&bad_manifests)?;
    std::fs::write(
        bad_manifests.join("x.yaml"),
        "apiVersion: v1\nkind: ConfigMap\n---\nfoo: bar\n",
    )?;
    let err = case(&charts, &images, &bad_manifests)?;
    assert!(
        err.contains("--manifests")
            && err.contains("x.yaml")
            && err.contains("document 1")
            && err.contains("apiVersion"),
        "{err}"
    );
    // An image list with a malformed digest, and an empty one.
    std::fs::write(&images, "r/clawfed-hub@sha256:abc\n")?;
    let err = case(&charts, &images, &manifests)?;
    assert!(
        err.contains("--images") && err.contains("r/clawfed-hub@sha256:abc"),
        "{err}"
    );
    // An archive of an image the list does not name.
    std::fs::write(&images, format!("r/clawfed-hub@{HUB_DIGEST}\n"))?;
    let archives = work.path().join("archives");
    std::fs::create_dir(&archives)?;
    std::fs::write(archives.join("other.oci.tar"), "x")?;
    let output = bundle(&[
        "--charts".as_ref(),
        charts.as_os_str(),
        "--manifests".as_ref(),
        manifests.as_os_str(),
        "--images".as_ref(),
        images.as_os_str(),
        "--image-archives".as_ref(),
        archives.as_os_str(),
        "--out".as_ref(),
        work.path().join("never").as_os_str(),
    ])?;
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        err.contains("--image-archives") && err.contains("other.oci.tar"),
        "{err}"
    );
    std::fs::write(&images, "# nothing\n")?;
    let err = case(&charts, &images, &manifests)?;
    assert!(
        err.contains("--images") && err.contains("no image"),
        "{err}"
    );
    Ok(())
}
