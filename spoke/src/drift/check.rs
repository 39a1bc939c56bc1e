//! The pure drift verdict: does a live object still hold what the spoke
//! applied? No I/O; fed JSON of typed objects.
//!
//! An object has drifted when
//! - it is gone (deleted, or it left the spoke's label selection); one
//!   that is being deleted is judged once it is gone;
//! - a value the spoke applies differs: every field of the desired object
//!   must be in the live one with the same value (maps: a subset, so fields
//!   the spoke does not set, such as an extra annotation or defaults, are
//!   ignored; lists: same length, element by element);
//! - the spoke's server-side-apply entry in `managedFields` is gone, or no
//!   longer owns one of the fields listed in [`owned_paths`] (another
//!   manager took it, even when it left the value alone).
//!
//! A live object whose generation annotation is newer than the desired
//! record is work in flight, not drift.

use serde_json::{Map, Value};

use clawfed_proto::labels;

/// What changed, when an object drifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// Why, e.g. `deleted`, `value of spec.replicas changed`.
    pub reason: String,
    /// The field manager that changed it, when the object says so.
    pub manager: Option<String>,
}

/// Fields (managedFields paths, `f:` keys) the spoke must own on `kind`
/// beyond the value check.
pub fn owned_paths(kind: &str) -> &'static [&'static [&'static str]] {
    match kind {
        "Deployment" => &[&["f:spec", "f:replicas"]],
        _ => &[],
    }
}

/// The verdict for one object: `live` is `None` when it is gone.
pub fn check(kind: &str, manager: &str, desired: &Value, live: Option<&Value>) -> Option<Drift> {
    let Some(live) = live else {
        return Some(Drift {
            reason: "deleted".into(),
            manager: None,
        });
    };
    // Going away: judged once it is gone (a stop deleting it holds the
    // target's lock, and its record then says the object is not wanted).
    if live.pointer("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    if newer_generation(desired, live) {
        return None;
    }
    let changed = |path: Vec<Seg>| Drift {
        reason: format!("value of {} changed", display(&path)),
        manager: changed_by(live, manager, &path),
    };
    for (pointer, key) in [
        ("/metadata/labels", "labels"),
        ("/metadata/annotations", "annotations"),
    ] {
        let mut path = vec![Seg::Key("metadata".into()), Seg::Key(key.into())];
        if let Some(want) = desired.pointer(pointer)
            && let Some(path) = mismatch(want, live.pointer(pointer), &mut path)
        {
            return Some(changed(path));
        }
    }
    if let Some(obj) = desired.as_object() {
        for (k, want) in obj {
            if matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind") {
                continue;
            }
            if let Some(path) = mismatch(want, live.get(k), &mut vec![Seg::Key(k.clone())]) {
                return Some(changed(path));
            }
        }
    }
    let last = last_other_manager(live, manager);
    let Some(ours) = own_entry(live, manager) else {
        return Some(Drift {
            reason: format!("fields of {manager} taken by another manager"),
            manager: last,
        });
    };
    for path in owned_paths(kind) {
        let mut at = ours;
        for step in *path {
            match at.get(*step) {
                Some(next) => at = next,
                None => {
                    let field = path
                        .iter()
                        .map(|s| s.trim_start_matches("f:"))
                        .collect::<Vec<_>>()
                        .join(".");
                    return Some(Drift {
                        reason: format!("ownership of {field} taken"),
                        manager: last,
                    });
                }
            }
        }
    }
    None
}

/// What [`check`] needs of `live` against `desired`, and nothing more, so a
/// spoke can keep a copy of every managed object: the fields `desired` sets
/// (lists keep their length), the identity and deletion marks, and the
/// `managedFields` entries the verdict reads, with the spoke's own entry cut
/// down to [`owned_paths`] and status writers left out. `check` gives the
/// same verdict on the result as on `live`.
pub fn compact(kind: &str, manager: &str, live: Value, desired: &Value) -> Value {
    let Value::Object(mut live) = live else {
        return live;
    };
    let mut out = Map::new();
    if let Some(Value::Object(mut meta)) = live.remove("metadata") {
        let mut m = Map::new();
        for key in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "deletionTimestamp",
        ] {
            if let Some(v) = meta.remove(key) {
                m.insert(key.into(), v);
            }
        }
        for key in ["labels", "annotations"] {
            if let (Some(v), Some(want)) = (
                meta.remove(key),
                desired.pointer(&format!("/metadata/{key}")),
            ) {
                m.insert(key.into(), project(v, want));
            }
        }
        if let Some(Value::Array(entries)) = meta.remove("managedFields") {
            let kept: Vec<Value> = entries
                .into_iter()
                .filter(|e| e.get("subresource").and_then(Value::as_str) != Some("status"))
                .map(|mut e| {
                    let own = e.get("manager").and_then(Value::as_str) == Some(manager)
                        && e.get("operation").and_then(Value::as_str) == Some("Apply")
                        && e.get("subresource").is_none();
                    if own && let Some(fields) = e.get_mut("fieldsV1") {
                        *fields = prune(fields, owned_paths(kind));
                    }
                    e
                })
                .collect();
            m.insert("managedFields".into(), Value::Array(kept));
        }
        out.insert("metadata".into(), Value::Object(m));
    }
    if let Some(want) = desired.as_object() {
        for (k, w) in want {
            if matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind") {
                continue;
            }
            if let Some(v) = live.remove(k) {
                out.insert(k.clone(), project(v, w));
            }
        }
    }
    Value::Object(out)
}

/// `live` cut down to the shape of `want` (maps: its keys; lists: the same
/// length, elements cut down by position).
fn project(live: Value, want: &Value) -> Value {
    match (live, want) {
        (Value::Object(mut l), Value::Object(w)) => Value::Object(
            w.iter()
                .filter_map(|(k, wv)| l.remove(k).map(|lv| (k.clone(), project(lv, wv))))
                .collect(),
        ),
        (Value::Array(l), Value::Array(w)) => Value::Array(
            l.into_iter()
                .enumerate()
                .map(|(i, lv)| match w.get(i) {
                    Some(wv) => project(lv, wv),
                    None => Value::Null,
                })
                .collect(),
        ),
        (live, _) => live,
    }
}

/// A `fieldsV1` set holding only `paths` (where it holds them).
fn prune(fields: &Value, paths: &[&[&str]]) -> Value {
    let mut out = Value::Object(Map::new());
    for path in paths {
        let mut at = fields;
        let mut found = true;
        for step in *path {
            match at.get(*step) {
                Some(next) => at = next,
                None => {
                    found = false;
                    break;
                }
            }
        }
        if !found {
            continue;
        }
        let mut cursor = &mut out;
        for step in *path {
            cursor = cursor
                .as_object_mut()
                .expect("built as objects")
                .entry(step.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        *cursor = at.clone();
    }
    out
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn display(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The first path under `path` where `live` does not hold `want`.
fn mismatch(want: &Value, live: Option<&Value>, path: &mut Vec<Seg>) -> Option<Vec<Seg>> {
    match (want, live) {
        // An empty map or list the spoke sets is satisfied by an absent one
        // (the apiserver drops empty collections).
        (Value::Object(w), None) if w.is_empty() => None,
        (Value::Array(w), None) if w.is_empty() => None,
        (Value::Null, None) => None,
        (_, None) => Some(path.clone()),
        (Value::Object(w), Some(Value::Object(l))) => w.iter().find_map(|(k, v)| {
            path.push(Seg::Key(k.clone()));
            let r = mismatch(v, l.get(k), path);
            path.pop();
            r
        }),
        (Value::Array(w), Some(Value::Array(l))) => {
            if w.len() != l.len() {
                return Some(path.clone());
            }
            w.iter().zip(l).enumerate().find_map(|(i, (a, b))| {
                path.push(Seg::Index(i));
                let r = mismatch(a, Some(b), path);
                path.pop();
                r
            })
        }
        (w, Some(l)) => (w != l).then(|| path.clone()),
    }
}

/// Whether a `fieldsV1` set holds `path` (list elements by any key).
fn holds(fields: &Value, path: &[Seg]) -> bool {
    match path.split_first() {
        None => true,
        Some((Seg::Key(k), rest)) => fields.get(format!("f:{k}")).is_some_and(|f| holds(f, rest)),
        Some((Seg::Index(_), rest)) => fields.as_object().is_some_and(|o| {
            o.iter()
                .filter(|(k, _)| !k.starts_with("f:") && *k != ".")
                .any(|(_, f)| holds(f, rest))
        }),
    }
}

/// The other manager that now owns `path`, else the one that wrote last.
fn changed_by(live: &Value, manager: &str, path: &[Seg]) -> Option<String> {
    entries(live)
        .filter(|e| e.get("manager").and_then(Value::as_str) != Some(manager))
        .filter(|e| e.get("subresource").and_then(Value::as_str) != Some("status"))
        .filter(|e| e.get("fieldsV1").is_some_and(|f| holds(f, path)))
        .max_by_key(|e| e.get("time").and_then(Value::as_str).unwrap_or_default())
        .and_then(|e| e.get("manager").and_then(Value::as_str))
        .map(str::to_string)
        .or_else(|| last_other_manager(live, manager))
}

fn generation(v: &Value) -> Option<i64> {
    v.pointer("/metadata/annotations")?
        .get(labels::GENERATION_ANNOTATION)?
        .as_str()?
        .parse()
        .ok()
}

fn newer_generation(desired: &Value, live: &Value) -> bool {
    matches!((generation(desired), generation(live)), (Some(d), Some(l)) if l > d)
}

fn entries(live: &Value) -> impl Iterator<Item = &Value> {
    live.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The `fieldsV1` of `manager`'s server-side-apply entry (not a subresource).
fn own_entry<'a>(live: &'a Value, manager: &str) -> Option<&'a Value> {
    entries(live)
        .find(|e| {
            e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
                && e.get("subresource").and_then(Value::as_str).is_none()
        })
        .and_then(|e| e.get("fieldsV1"))
}

/// The other manager that wrote last (status writers excluded): who most
/// likely changed what the spoke owns.
pub fn last_other_manager(live: &Value, manager: &str) -> Option<String> {
    entries(live)
        .filter(|e| e.get("manager").and_then(Value::as_str) != Some(manager))
        .filter(|e| e.get("subresource").and_then(Value::as_str) != Some("status"))
        .max_by_key(|e| e.get("time").and_then(Value::as_str).unwrap_or_default())
        .and_then(|e| e.get("manager").and_then(Value::as_str))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn desired() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "h", "labels": {"a": "1"},
                "annotations": {labels::GENERATION_ANNOTATION: "2"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "harness", "image": "img:1"}]}}}
        })
    }

    fn live() -> Value {
        json!({
            "metadata": {"name": "h", "labels": {"a": "1", "extra": "x"},
                "annotations": {labels::GENERATION_ANNOTATION: "2", "note": "mine"},
                "managedFields": [
                    {"manager": "clawfed-spoke", "operation": "Apply",
                     "time": "2026-01-01T00:00:00Z",
                     "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "subresource": "status", "time": "2026-01-01T00:00:09Z"},
                    {"manager": "kubectl-annotate", "operation": "Update",
                     "time": "2026-01-01T00:00:05Z"}
                ]},
            "spec": {"replicas": 1, "strategy": {}, "template": {"spec": {"containers": [
                {"name": "harness", "image": "img:1", "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"replicas": 1}
        })
    }

    #[test]
    fn defaults_and_foreign_fields_are_not_drift() {
        assert_eq!(
            check("Deployment", "clawfed-spoke", &desired(), Some(&live())),
            None
        );
    }

    #[test]
    fn deletion_value_changes_and_ownership_loss_are_drift() {
        let d = desired();
        assert_eq!(
            check("Deployment", "clawfed-spoke", &d, None).map(|d| d.reason),
            Some("deleted".into())
        );
        let mut l = live();
        l["spec"]["replicas"] = json!(0);
        let v = check("Deployment", "clawfed-spoke", &d, Some(&l)).expect("drift");
        assert_eq!(v.reason, "value of spec.replicas changed");
        assert_eq!(v.manager.as_deref(), Some("kubectl-annotate"));
        // The manager owning the changed field is named, not the last writer.
        l["metadata"]["managedFields"]
            .as_array_mut()
            .expect("entries")
            .push(json!({"manager": "scaler", "operation": "Update",
                "time": "2026-01-01T00:00:01Z", "fieldsV1": {"f:spec": {"f:replicas": {}}}}));
        let v = check("Deployment", "clawfed-spoke", &d, Some(&l)).expect("drift");
        assert_eq!(v.manager.as_deref(), Some("scaler"));
        let mut l = live();
        l["spec"]["template"]["spec"]["containers"][0]["image"] = json!("img:2");
        assert_eq!(
            check("Deployment", "clawfed-spoke", &d, Some(&l)).map(|d| d.reason),
            Some("value of spec.template.spec.containers[0].image changed".into())
        );
        let mut l = live();
        l["metadata"]["labels"] = json!({"extra": "x"});
        assert_eq!(
            check("Deployment", "clawfed-spoke", &d, Some(&l)).map(|d| d.reason),
            Some("value of metadata.labels.a changed".into())
        );
        let mut l = live();
        l["metadata"]["managedFields"][0]["fieldsV1"] = json!({"f:spec": {}});
        assert_eq!(
            check("Deployment", "clawfed-spoke", &d, Some(&l)).map(|d| d.reason),
            Some("ownership of spec.replicas taken".into())
        );
        let mut l = live();
        l["metadata"]["managedFields"][0]["manager"] = json!("other");
        assert!(check("Deployment", "clawfed-spoke", &d, Some(&l)).is_some());
    }

    /// The compacted copy the repairer keeps gives the same verdicts.
    #[test]
    fn compact_keeps_every_verdict() {
        let d = desired();
        let same = |l: Value| {
            let full = check("Deployment", "clawfed-spoke", &d, Some(&l));
            let small = compact("Deployment", "clawfed-spoke", l, &d);
            assert_eq!(check("Deployment", "clawfed-spoke", &d, Some(&small)), full);
            small
        };
        let small = same(live());
        assert!(small.get("status").is_none());
        assert!(small.pointer("/spec/strategy").is_none(), "{small}");
        assert!(
            small
                .pointer("/spec/template/spec/containers/0/imagePullPolicy")
                .is_none()
        );
        assert_eq!(
            small
                .pointer("/metadata/managedFields")
                .map(|m| m.as_array().map(Vec::len)),
            Some(Some(2)),
            "the status writer's entry is left out"
        );
        let mut l = live();
        l["spec"]["replicas"] = json!(0);
        same(l);
        let mut l = live();
        l["spec"]["template"]["spec"]["containers"][0]["image"] = json!("img:2");
        same(l);
        let mut l = live();
        l["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .expect("containers")
            .push(json!({"name": "sidecar"}));
        same(l);
        let mut l = live();
        l["metadata"]["labels"] = json!({"extra": "x"});
        same(l);
        let mut l = live();
        l["metadata"]["managedFields"][0]["fieldsV1"] = json!({"f:spec": {"f:template": {}}});
        same(l);
        let mut l = live();
        l["metadata"]["managedFields"][0]["manager"] = json!("other");
        same(l);
        let mut l = live();
        l["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:10Z");
        same(l);
        let mut l = live();
        l["metadata"]["annotations"][labels::GENERATION_ANNOTATION] = json!("3");
        l["spec"]["replicas"] = json!(0);
        same(l);
    }

    #[test]
    fn newer_generation_is_work_in_flight() {
        let mut l = live();
        l["metadata"]["annotations"][labels::GENERATION_ANNOTATION] = json!("3");
        l["spec"]["replicas"] = json!(0);
        assert_eq!(
            check("Deployment", "clawfed-spoke", &desired(), Some(&l)),
            None
        );
    }
}
