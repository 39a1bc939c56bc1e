//! Issue 32 (the contract in proto): every `clawfed.io/*` label and
//! annotation key, and the manager label, is defined once, in
//! `proto/src/labels.rs`; the sources use the constants. This scans the
//! non-test part of every source file of the workspace for the literals.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn label_keys_are_literals_only_in_proto_labels() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in [
        "hub/src",
        "spoke/src",
        "proto/src",
        "kubeutil/src",
        "tunnel/src",
        "e2e/pods/src",
        "e2e/bench/src",
        "tests/src",
    ] {
        sources(&root.join(dir), &mut files);
    }
    let labels = root.join("proto/src/labels.rs").canonicalize().unwrap();
    let mut offenders = Vec::new();
    for file in &files {
        // A module's tests split out of it (`foo/tests.rs`) are tests.
        if file.canonicalize().unwrap() == labels || file.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        // Tests may spell keys out (they check the contract's values).
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, line) in code.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                continue;
            }
            if line.contains("\"clawfed.io/") || line.contains("\"app.kubernetes.io/managed-by\"") {
                offenders.push(format!("{}:{}: {}", file.display(), i + 1, trimmed));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "label keys outside proto/src/labels.rs:\n{}",
        offenders.join("\n")
    );
}
