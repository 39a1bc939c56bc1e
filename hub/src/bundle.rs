//! `clawfed-hub bundle`: an offline install bundle for clusters that reach
//! no registry or chart repository.
//!
//! # Layout
//! - this file: what goes into a bundle and the profile rule (pure:
//!   [`ImageRef::parse`], [`check_profile`], [`sha256sums`], the generated
//!   files), then the thin I/O that reads the sources ([`assemble`]) and
//!   writes a directory or a tar file ([`write`]).
//! - `ustar.rs`: the deterministic tar writer.
//!
//! A bundle holds:
//!
//! ```text
//! charts/<chart>/…        every Helm chart under --charts, as is
//! manifests/<dir>/*.yaml  the plain manifests of each --manifests directory
//! images.txt              the image references, one a line
//! images/<image>.oci.tar  the images themselves, with --image-archives
//! values/<chart>.yaml     image.repository/tag/digest for the hub and spoke charts
//! bundle.yaml             clawfed version, profile, charts, images
//! SHA256SUMS              `sha256sum -c` format, every other file
//! ```
//!
//! The production profile (the default) requires every image by
//! `@sha256:` digest: a tag can move after the bundle was checked, a
//! digest cannot. The dev profile allows tags.

pub mod ustar;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Errors of building a bundle. Each names the flag, file or image at fault.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// An image reference that does not parse.
    #[error("--images: image {image:?}: {reason}")]
    InvalidImage { image: String, reason: &'static str },
    /// The same image listed twice.
    #[error("--images: image {image:?} is listed twice")]
    DuplicateImage { image: String },
    /// Production profile and images without a digest.
    #[error(
        "--profile production requires every image by digest, and {images} has no @sha256: digest \
         (build the images with deploy/images/build.sh, or use --profile dev to allow tags)"
    )]
    DigestRequired { images: String },
    /// The image list is empty.
    #[error("--images {path}: lists no image")]
    NoImages { path: PathBuf },
    /// No chart under `--charts`.
    #[error("--charts {path}: holds no chart (a directory with Chart.yaml)")]
    NoCharts { path: PathBuf },
    /// A directory under `--charts` that is not a valid chart.
    #[error("--charts: {path}: {reason}")]
    InvalidChart { path: PathBuf, reason: String },
    /// `--image-archives` without archives, or one no listed image names.
    #[error("--image-archives {path}: {reason}")]
    ImageArchives { path: PathBuf, reason: String },
    /// A `--manifests` directory without manifests.
    #[error("--manifests {path}: holds no *.yaml file")]
    NoManifests { path: PathBuf },
    /// A manifest document that is not a Kubernetes object.
    #[error("--manifests: {path}: document {index}: {reason}")]
    InvalidManifest {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    /// Two sources that would land on the same bundle path.
    #[error("two sources write {path} in the bundle")]
    Collision { path: String },
    /// `--out` names something that already holds files.
    #[error("--out {path}: already exists (give a new or empty directory, or a new FILE.tar)")]
    OutExists { path: PathBuf },
    /// A source path the bundle cannot carry (not UTF-8, or too long for tar).
    #[error("{path}: cannot be stored in the bundle ({reason})")]
    BadPath { path: String, reason: &'static str },
    /// A source could not be read.
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bundle could not be written.
    #[error("--out: cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = BundleError> = std::result::Result<T, E>;

/// Which image references a bundle accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Every image by `@sha256:` digest.
    Production,
    /// Tags allowed (local and test installs).
    Dev,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Production => "production",
            Self::Dev => "dev",
        }
    }
}

/// An OCI image reference: `repository[:tag][@sha256:<64 hex>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host (with port) and path, e.g. `registry.local:5000/clawfed/clawfed-hub`.
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:<64 lowercase hex>`.
    pub digest: Option<String>,
}

impl ImageRef {
    pub fn parse(image: &str) -> Result<Self> {
        let invalid = |reason| BundleError::InvalidImage {
            image: image.to_owned(),
            reason,
        };
        let (name, digest) = match image.split_once('@') {
            Some((name, digest)) => {
                let hex = digest
                    .strip_prefix("sha256:")
                    .ok_or_else(|| invalid("the digest must be sha256:<64 hex>"))?;
                let lower_hex = hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                if hex.len() != 64 || !lower_hex {
                    return Err(invalid("the digest must be sha256:<64 lowercase hex>"));
                }
                (name, Some(digest.to_owned()))
            }
            None => (image, None),
        };
        // A colon after the last slash starts the tag; one before it is a
        // registry port.
        let last_segment = name.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name[last_segment..].find(':') {
            Some(i) => (
                &name[..last_segment + i],
                Some(&name[last_segment + i + 1..]),
            ),
            None => (name, None),
        };
        let repository_ok = !repository.is_empty()
            && repository.split('/').all(|s| !s.is_empty())
            && repository
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:".contains(&b));
        if !repository_ok {
            return Err(invalid(
                "the repository must be lowercase letters, digits, '.', '_', '-', '/' (and a registry port)",
            ));
        }
        if let Some(tag) = tag {
            let tag_ok = (1..=128).contains(&tag.len())
                && !tag.starts_with(['.', '-'])
                && tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !tag_ok {
                return Err(invalid(
                    "the tag must be 1 to 128 letters, digits, '.', '_', '-'",
                ));
            }
        }
        Ok(Self {
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    /// The last path segment, e.g. `clawfed-hub`.
    pub fn name(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// The image list: one reference a line; blank lines and `#` comments are
/// skipped. Duplicates are refused.
pub fn parse_image_list(text: &str) -> Result<Vec<ImageRef>> {
    let mut images: Vec<ImageRef> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let image = ImageRef::parse(line)?;
        if images.contains(&image) {
            return Err(BundleError::DuplicateImage {
                image: line.to_owned(),
            });
        }
        images.push(image);
    }
    Ok(images)
}

/// The profile rule: in production every image carries a digest.
pub fn check_profile(images: &[ImageRef], profile: Profile) -> Result<()> {
    if profile == Profile::Dev {
        return Ok(());
    }
    let missing: Vec<String> = images
        .iter()
        .filter(|i| i.digest.is_none())
        .map(ToString::to_string)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(BundleError::DigestRequired {
        images: missing.join(", "),
    })
}

/// One file of the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    /// Relative, `/`-separated.
    pub path: String,
    pub data: Vec<u8>,
    pub executable: bool,
}

impl BundleFile {
    fn new(path: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        Self {
            path: path.into(),
            data: data.into(),
            executable: false,
        }
    }
}

/// `SHA256SUMS` in the format `sha256sum -c` reads: `<hex>  <path>`,
/// sorted by path.
pub fn sha256sums(files: &[BundleFile]) -> String {
    let mut lines: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.path.clone(), hex::encode(Sha256::digest(&f.data))))
        .collect();
    lines.sort();
    lines
        .into_iter()
        .map(|(path, sum)| format!("{sum}  {path}\n"))
        .collect()
}

/// The charts' values that pin the charts' own images
/// (`image.repository`, `image.tag`, `image.digest`; the digest wins).
#[derive(Debug, Serialize)]
struct ImageValues<'a> {
    image: ImageValue<'a>,
}

#[derive(Debug, Serialize)]
struct ImageValue<'a> {
    repository: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tag: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<&'a str>,
}

/// The charts whose image the bundle pins in `values/<chart>.yaml`.
pub const PINNED_CHARTS: [&str; 2] = ["clawfed-hub", "clawfed-spoke"];

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest<'a> {
    version: u32,
    clawfed_version: &'a str,
    profile: Profile,
    charts: &'a [String],
    images: Vec<String>,
}

/// The generated files: `images.txt`, `values/*.yaml`, `bundle.yaml`.
pub fn generated_files(
    images: &[ImageRef],
    charts: &[String],
    profile: Profile,
) -> Vec<BundleFile> {
    let list: Vec<String> = images.iter().map(ToString::to_string).collect();
    let mut files = vec![BundleFile::new(
        "images.txt",
        list.iter().map(|i| format!("{i}\n")).collect::<String>(),
    )];
    for chart in PINNED_CHARTS {
        let Some(image) = images.iter().find(|i| i.name() == chart) else {
            continue;
        };
        let values = ImageValues {
            image: ImageValue {
                repository: &image.repository,
                tag: image.tag.as_deref(),
                digest: image.digest.as_deref(),
            },
        };
        let yaml = serde_yaml_ng::to_string(&values).expect("plain strings serialize");
        files.push(BundleFile::new(
            format!("values/{chart}.yaml"),
            format!("# The {chart} chart's image as this bundle carries it: helm install -f this file.\n{yaml}"),
        ));
    }
    let manifest = Manifest {
        version: 1,
        clawfed_version: env!("CARGO_PKG_VERSION"),
        profile,
        charts,
        images: list,
    };
    let yaml = serde_yaml_ng::to_string(&manifest).expect("plain strings serialize");
    files.push(BundleFile::new("bundle.yaml", yaml));
    files
}

/// Where a bundle's content comes from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// A directory with one sub-directory per Helm chart.
    pub charts: PathBuf,
    /// Directories of plain manifests (`*.yaml`, not recursive).
    pub manifests: Vec<PathBuf>,
    /// The image list file.
    pub images: PathBuf,
    /// A directory of `<image>.oci.tar` archives to carry (build.sh's
    /// output), each named after a listed image.
    pub image_archives: Option<PathBuf>,
    pub profile: Profile,
}

/// Reads and checks every source; returns the bundle's files, `SHA256SUMS`
/// last.
pub fn assemble(sources: &Sources) -> Result<Vec<BundleFile>> {
    let text = read_string(&sources.images)?;
    let images = parse_image_list(&text)?;
    if images.is_empty() {
        return Err(BundleError::NoImages {
            path: sources.images.clone(),
        });
    }
    check_profile(&images, sources.profile)?;

    let mut files = Vec::new();
    let charts = read_charts(&sources.charts, &mut files)?;
    for dir in &sources.manifests {
        read_manifests(dir, &mut files)?;
    }
    if let Some(dir) = &sources.image_archives {
        read_image_archives(dir, &images, &mut files)?;
    }
    files.extend(generated_files(&images, &charts, sources.profile));
    let mut paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    paths.sort_unstable();
    if let Some(pair) = paths.windows(2).find(|w| w[0] == w[1]) {
        return Err(BundleError::Collision {
            path: pair[0].to_owned(),
        });
    }
    let sums = sha256sums(&files);
    files.push(BundleFile::new("SHA256SUMS", sums));
    Ok(files)
}

/// Every sub-directory of `dir` must be a chart (Chart.yaml with a name and
/// a version); plain files beside them are not bundled. Returns the chart
/// names.
fn read_charts(dir: &Path, files: &mut Vec<BundleFile>) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in sorted_entries(dir)? {
        if !entry.is_dir() {
            continue;
        }
        let chart_yaml = entry.join("Chart.yaml");
        let text = match std::fs::read_to_string(&chart_yaml) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BundleError::InvalidChart {
                    path: entry,
                    reason: "no Chart.yaml".into(),
                });
            }
            Err(source) => {
                return Err(BundleError::Read {
                    path: chart_yaml,
                    source,
                });
            }
        };
        let invalid = |reason: String| BundleError::InvalidChart {
            path: chart_yaml.clone(),
            reason,
        };
        let meta: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&text).map_err(|e| invalid(format!("not YAML: {e}")))?;
        for key in ["name", "version"] {
            if meta.get(key).and_then(|v| v.as_str()).is_none() {
                return Err(invalid(format!("has no string {key:?}")));
            }
        }
        let dir_name = utf8_name(&entry)?;
        add_tree(&entry, &format!("charts/{dir_name}"), files)?;
        names.push(dir_name);
    }
    if names.is_empty() {
        return Err(BundleError::NoCharts {
            path: dir.to_owned(),
        });
    }
    Ok(names)
}

/// The `<image>.oci.tar` files of `dir` under `images/`; each must be named
/// after a listed image, so a stale archive of another image is not carried.
fn read_image_archives(dir: &Path, images: &[ImageRef], files: &mut Vec<BundleFile>) -> Result<()> {
    let refuse = |reason: String| BundleError::ImageArchives {
        path: dir.to_owned(),
        reason,
    };
    let mut found = false;
    for path in sorted_entries(dir)? {
        let name = utf8_name(&path)?;
        let Some(image) = name.strip_suffix(".oci.tar") else {
            continue;
        };
        if !images.iter().any(|i| i.name() == image) {
            return Err(refuse(format!("{name}: no image {image:?} in --images")));
        }
        let data = std::fs::read(&path).map_err(|source| BundleError::Read {
            path: path.clone(),
            source,
        })?;
        files.push(BundleFile::new(format!("images/{name}"), data));
        found = true;
    }
    if !found {
        return Err(refuse("holds no <image>.oci.tar".into()));
    }
    Ok(())
}

/// The `*.yaml` files of `dir`, each document a Kubernetes object (or
/// empty), under `manifests/<dir name>/`.
fn read_manifests(dir: &Path, files: &mut Vec<BundleFile>) -> Result<()> {
    let dir_name = utf8_name(dir)?;
    let mut found = false;
    for path in sorted_entries(dir)? {
        let is_yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
        if !is_yaml || !path.is_file() {
            continue;
        }
        let text = read_string(&path)?;
        check_manifest(&path, &text)?;
        let name = utf8_name(&path)?;
        files.push(BundleFile::new(
            format!("manifests/{dir_name}/{name}"),
            text,
        ));
        found = true;
    }
    if !found {
        return Err(BundleError::NoManifests {
            path: dir.to_owned(),
        });
    }
    Ok(())
}

/// Each document is empty or a mapping with string `apiVersion` and `kind`.
fn check_manifest(path: &Path, text: &str) -> Result<()> {
    use serde::Deserialize;
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let invalid = |reason: String| BundleError::InvalidManifest {
            path: path.to_owned(),
            index,
            reason,
        };
        let value = serde_yaml_ng::Value::deserialize(document)
            .map_err(|e| invalid(format!("not YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        for key in ["apiVersion", "kind"] {
            if value.get(key).and_then(|v| v.as_str()).is_none() {
                return Err(invalid(format!("has no string {key:?}")));
            }
        }
    }
    Ok(())
}

/// Every file under `dir`, recursively, as `prefix/<relative path>`.
fn add_tree(dir: &Path, prefix: &str, files: &mut Vec<BundleFile>) -> Result<()> {
    for path in sorted_entries(dir)? {
        let name = utf8_name(&path)?;
        let inside = format!("{prefix}/{name}");
        if path.is_dir() {
            add_tree(&path, &inside, files)?;
            continue;
        }
        let data = std::fs::read(&path).map_err(|source| BundleError::Read {
            path: path.clone(),
            source,
        })?;
        let executable = is_executable(&path)?;
        files.push(BundleFile {
            path: inside,
            data,
            executable,
        });
    }
    Ok(())
}

fn is_executable(path: &Path) -> Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|source| BundleError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(meta.permissions().mode() & 0o111 != 0)
}

/// Directory entries sorted by name, so a bundle's order does not depend
/// on the filesystem.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let read = |source| BundleError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut paths = std::fs::read_dir(dir)
        .map_err(read)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(read)?;
    paths.sort();
    Ok(paths)
}

fn utf8_name(path: &Path) -> Result<String> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| BundleError::BadPath {
            path: path.display().to_string(),
            reason: "its name is not UTF-8",
        })
}

fn read_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| BundleError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Writes the bundle to `out`: a `.tar` path becomes one tar file (written
/// beside it first, then renamed, so a half-written bundle never carries
/// the final name); any other path a directory, new or empty.
pub fn write(out: &Path, files: &[BundleFile]) -> Result<()> {
    let write_err = |path: &Path| {
        let path = path.to_owned();
        move |source| BundleError::Write { path, source }
    };
    if out.extension().is_some_and(|e| e == "tar") {
        if out.exists() {
            return Err(BundleError::OutExists {
                path: out.to_owned(),
            });
        }
        let entries: Vec<ustar::Entry<'_>> = files
            .iter()
            .map(|f| ustar::Entry {
                path: &f.path,
                data: &f.data,
                executable: f.executable,
            })
            .collect();
        let tar = ustar::archive(&entries).map_err(|e| BundleError::BadPath {
            path: e.0,
            reason: "longer than a tar header holds",
        })?;
        let mut partial = out.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        std::fs::write(&partial, tar).map_err(write_err(&partial))?;
        return std::fs::rename(&partial, out).map_err(write_err(out));
    }
    let non_empty = out.exists()
        && std::fs::read_dir(out)
            .map_err(write_err(out))?
            .next()
            .is_some();
    if non_empty {
        return Err(BundleError::OutExists {
            path: out.to_owned(),
        });
    }
    for file in files {
        let path = out.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write_err(parent))?;
        }
        std::fs::write(&path, &file.data).map_err(write_err(&path))?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(write_err(&path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn image_references() {
        let cases: &[(&str, &str, Option<&str>, bool)] = &[
            (
                "clawfed/clawfed-hub:0.1.0",
                "clawfed/clawfed-hub",
                Some("0.1.0"),
                false,
            ),
            (
                "registry.local:5000/a/clawfed-spoke",
                "registry.local:5000/a/clawfed-spoke",
                None,
                false,
            ),
            ("localhost:5000/x:v1", "localhost:5000/x", Some("v1"), false),
        ];
        for (input, repository, tag, digest) in cases {
            let image = ImageRef::parse(input).unwrap();
            assert_eq!(image.repository, *repository, "{input}");
            assert_eq!(image.tag.as_deref(), *tag, "{input}");
            assert_eq!(image.digest.is_some(), *digest, "{input}");
            assert_eq!(image.to_string(), *input);
        }
        let pinned = format!("r.local/clawfed/clawfed-hub:0.1.0@{DIGEST}");
        let image = ImageRef::parse(&pinned).unwrap();
        assert_eq!(image.digest.as_deref(), Some(DIGEST));
        assert_eq!(image.name(), "clawfed-hub");
        assert_eq!(image.to_string(), pinned);
    }

    #[test]
    fn bad_references_name_the_image() {
        for bad in [
            "",
            "Upper/case",
            "a//b",
            "a:",
            "a@sha256:short",
            "a@md5:0123",
            "a@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            let err = ImageRef::parse(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    #[test]
    fn production_requires_digests_and_dev_allows_tags() {
        let list =
            format!("# built images\nr/clawfed-hub@{DIGEST}\n\nr/clawfed-spoke:dev # tag only\n");
        let images = parse_image_list(&list).unwrap();
        assert_eq!(images.len(), 2);
        let err = check_profile(&images, Profile::Production)
            .unwrap_err()
            .to_string();
        assert!(err.contains("r/clawfed-spoke:dev"), "{err}");
        assert!(!err.contains("clawfed-hub"), "{err}");
        check_profile(&images, Profile::Dev).unwrap();
        check_profile(&images[..1], Profile::Production).unwrap();
        assert!(matches!(
            parse_image_list("a:1\na:1\n"),
            Err(BundleError::DuplicateImage { .. })
        ));
    }

    #[test]
    fn values_pin_the_charts_images() {
        let images = parse_image_list(&format!(
            "r/clawfed-hub:0.1.0@{DIGEST}\nr/clawfed-spoke:dev\nr/other:1\n"
        ))
        .unwrap();
        let files = generated_files(&images, &["clawfed-hub".into()], Profile::Dev);
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "images.txt",
                "values/clawfed-hub.yaml",
                "values/clawfed-spoke.yaml",
                "bundle.yaml"
            ]
        );
        let hub: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&files[1].data).unwrap();
        assert_eq!(hub["image"]["digest"].as_str(), Some(DIGEST));
        assert_eq!(hub["image"]["repository"].as_str(), Some("r/clawfed-hub"));
        let spoke: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&files[2].data).unwrap();
        assert_eq!(spoke["image"]["tag"].as_str(), Some("dev"));
        assert!(spoke["image"].get("digest").is_none());
    }

    #[test]
    fn sums_are_sorted_and_in_sha256sum_format() {
        let files = [BundleFile::new("b", "x"), BundleFile::new("a/c", "")];
        assert_eq!(
            sha256sums(&files),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  a/c\n\
             2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881  b\n"
        );
    }
}
