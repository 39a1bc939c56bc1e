//! The served OpenAPI document as a test oracle: a validator for the
//! subset of JSON Schema the hub's document uses (`$ref`, `type` including
//! type lists with `null`, `properties`, `required`, `additionalProperties`,
//! `propertyNames`, `items`, `uniqueItems`, `enum`, `oneOf`/`anyOf`/`allOf`, `minimum`/`maximum`,
//! `minLength`/`maxLength`, `pattern`), and a walk over its operations.
//!
//! A keyword the validator does not know fails the validation, so the
//! document cannot outgrow the oracle silently.

use serde_json::Value;

/// One documented operation.
#[derive(Debug, Clone)]
pub struct Operation {
    /// Lowercase HTTP method.
    pub method: String,
    /// The path template, e.g. `/api/v1/namespaces/{ns}`.
    pub path: String,
    /// The operation object itself.
    pub op: Value,
}

/// Every operation of the document, in path order.
pub fn operations(doc: &Value) -> Vec<Operation> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in ["get", "put", "post", "delete", "patch"] {
            if let Some(op) = item.get(method) {
                out.push(Operation {
                    method: method.to_owned(),
                    path: path.clone(),
                    op: op.clone(),
                });
            }
        }
    }
    out
}

/// Keywords that only annotate a schema.
const ANNOTATIONS: [&str; 9] = [
    "description",
    "format",
    "title",
    "example",
    "examples",
    "default",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// Validates `value` against `schema`, resolving `$ref`s in `doc`; the
/// error names the JSON path of the first violation.
pub fn validate(doc: &Value, schema: &Value, value: &Value) -> Result<(), String> {
    check(doc, schema, value, "$", 0)
}

fn check(doc: &Value, schema: &Value, value: &Value, at: &str, depth: u32) -> Result<(), String> {
    if depth > 64 {
        return Err(format!("{at}: schema nesting too deep"));
    }
    if schema == &Value::Bool(true) {
        return Ok(());
    }
    let Some(keywords) = schema.as_object() else {
        return Err(format!("{at}: schema {schema} is not an object"));
    };
    for (keyword, arg) in keywords {
        match keyword.as_str() {
            "$ref" => {
                let name = arg
                    .as_str()
                    .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    .ok_or_else(|| format!("{at}: unsupported $ref {arg}"))?;
                let target = doc["components"]["schemas"]
                    .get(name)
                    .ok_or_else(|| format!("{at}: $ref to undefined schema {name}"))?;
                check(doc, target, value, at, depth + 1)?;
            }
            "type" => {
                let types: Vec<&str> = match arg {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => return Err(format!("{at}: bad type keyword {arg}")),
                };
                if !types.iter().any(|t| has_type(t, value)) {
                    return Err(format!("{at}: {value} is not of type {arg}"));
                }
            }
            "properties" => {
                if let (Some(props), Some(obj)) = (arg.as_object(), value.as_object()) {
                    for (name, sub) in props {
                        if let Some(v) = obj.get(name) {
                            check(doc, sub, v, &format!("{at}.{name}"), depth + 1)?;
                        }
                    }
                }
            }
            "required" => {
                if let Some(obj) = value.as_object() {
                    for name in arg
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                    {
                        if !obj.contains_key(name) {
                            return Err(format!("{at}: required property {name} is missing"));
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(obj) = value.as_object() {
                    let known = keywords.get("properties").and_then(Value::as_object);
                    for (name, v) in obj {
                        if known.is_some_and(|k| k.contains_key(name)) {
                            continue;
                        }
                        match arg {
                            Value::Bool(false) => {
                                return Err(format!("{at}: unknown property {name}"));
                            }
                            Value::Bool(true) => {}
                            sub => check(doc, sub, v, &format!("{at}.{name}"), depth + 1)?,
                        }
                    }
                }
            }
            "propertyNames" => {
                for name in value.as_object().into_iter().flatten().map(|(k, _)| k) {
                    check(
                        doc,
                        arg,
                        &Value::String(name.clone()),
                        &format!("{at}.{name}"),
                        depth + 1,
                    )?;
                }
            }
            "items" => {
                if let Some(items) = value.as_array() {
                    for (i, v) in items.iter().enumerate() {
                        check(doc, arg, v, &format!("{at}[{i}]"), depth + 1)?;
                    }
                }
            }
            "uniqueItems" => {
                if let (Some(items), Some(true)) = (value.as_array(), arg.as_bool()) {
                    for (i, v) in items.iter().enumerate() {
                        if items[..i].contains(v) {
                            return Err(format!("{at}[{i}]: {v} is listed twice"));
                        }
                    }
                }
            }
            "enum" => {
                if !arg.as_array().is_some_and(|vs| vs.contains(value)) {
                    return Err(format!("{at}: {value} is not one of {arg}"));
                }
            }
            "oneOf" | "anyOf" => {
                let subs = arg.as_array().cloned().unwrap_or_default();
                let passing = subs
                    .iter()
                    .filter(|s| check(doc, s, value, at, depth + 1).is_ok())
                    .count();
                let ok = if keyword == "oneOf" {
                    passing == 1
                } else {
                    passing >= 1
                };
                if !ok {
                    return Err(format!(
                        "{at}: {value} matches {passing} of the {keyword} alternatives"
                    ));
                }
            }
            "allOf" => {
                for s in arg.as_array().into_iter().flatten() {
                    check(doc, s, value, at, depth + 1)?;
                }
            }
            "minimum" | "maximum" => {
                if let (Some(n), Some(bound)) = (value.as_f64(), arg.as_f64()) {
                    let ok = if keyword == "minimum" {
                        n >= bound
                    } else {
                        n <= bound
                    };
                    if !ok {
                        return Err(format!("{at}: {n} is outside {keyword} {bound}"));
                    }
                }
            }
            "minLength" | "maxLength" => {
                if let (Some(s), Some(bound)) = (value.as_str(), arg.as_u64()) {
                    let len = s.chars().count() as u64;
                    let ok = if keyword == "minLength" {
                        len >= bound
                    } else {
                        len <= bound
                    };
                    if !ok {
                        return Err(format!("{at}: length {len} breaks {keyword} {bound}"));
                    }
                }
            }
            "pattern" => {
                if let Some(s) = value.as_str() {
                    let re = regex::Regex::new(arg.as_str().unwrap_or_default())
                        .map_err(|e| format!("{at}: bad pattern {arg}: {e}"))?;
                    if !re.is_match(s) {
                        return Err(format!("{at}: {s:?} does not match {arg}"));
                    }
                }
            }
            k if ANNOTATIONS.contains(&k) => {}
            other => return Err(format!("{at}: the validator does not know keyword {other}")),
        }
    }
    Ok(())
}

fn has_type(t: &str, value: &Value) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        // The hub's integers are i64 (`format: int64`).
        "integer" => value.is_i64(),
        "number" => value.is_number(),
        _ => false,
    }
}

/// The schema of the JSON body documented for `status` (`None` when that
/// answer has no body), or an error when `status` is not documented.
pub fn response_schema(op: &Value, status: u16) -> Result<Option<&Value>, String> {
    let response = op["responses"]
        .get(status.to_string())
        .ok_or_else(|| format!("status {status} is not documented"))?;
    Ok(response
        .get("content")
        .and_then(|c| c.get("application/json"))
        .and_then(|c| c.get("schema")))
}

/// The request body schema of an operation, if it takes one.
pub fn request_schema(op: &Value) -> Option<&Value> {
    op.get("requestBody")
        .and_then(|b| b.get("content"))
        .and_then(|c| c.get("application/json"))
        .and_then(|c| c.get("schema"))
}
