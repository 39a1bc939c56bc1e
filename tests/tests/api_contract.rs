//! The API contract as a new user meets it (issue 15 item 5): bodies that
//! are not JSON objects, gRPC codec failures answered with the error
//! table's codes, and the served OpenAPI document checked against the hub
//! by a property-based fuzzer (0 server errors, every answer documented and
//! matching its schema, every body the document refuses refused by the hub).
//!
//! Bodies are parsed before any store access, so these run on SQLite.

use std::cell::RefCell;
use std::collections::BTreeMap;

use clawfed_hub::auth::Role;
use clawfed_proto::admin::v1 as pb;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::openapi;
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use tonic::Code;

// ---- a REST caller ---------------------------------------------------------------

struct Answer {
    status: u16,
    body: Value,
    text: String,
}

async fn call(
    hub: &TestHub,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> Answer {
    let url = format!("{}{path}", hub.rest);
    let mut req = hub.http.request(
        reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method"),
        url,
    );
    if let Some(token) = token {
        req = req.header("authorization", token);
    }
    if let Some(body) = body {
        req = req.header("content-type", "application/json").body(body);
    }
    let response = req.send().await.expect("send request");
    let status = response.status().as_u16();
    let event_stream = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if event_stream {
        // A watch that follows never ends: its status and type are the
        // answer (the event schemas are checked by tests/tests/watch.rs).
        return Answer {
            status,
            body: Value::Null,
            text: String::new(),
        };
    }
    let text = response.text().await.expect("read body");
    Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[track_caller]
fn expect_invalid(a: &Answer, field: &str, what: &str) {
    assert_eq!(a.status, 400, "{what}: {}", a.text);
    assert_eq!(a.body["error"]["code"], "invalid_argument", "{what}");
    assert_eq!(a.body["error"]["field"], field, "{what}: {}", a.text);
}

// ---- JSON arrays are not objects -----------------------------------------------------

/// serde's derived structs accept a sequence and fill the fields by
/// position: `["x"]` created namespace `x`, and `[60, true]` asked for a
/// re-enrolling bootstrap token. Each is a 400 naming the body (or the
/// nested field), and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_arrays_where_objects_are_expected_are_400() {
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let root = bearer(&hub.root_token);
    let root = Some(root.as_str());
    let post = |path: &str, body: Value| {
        let hub = &hub;
        let path = path.to_owned();
        async move {
            call(
                hub,
                "post",
                &path,
                root,
                Some(body.to_string().into_bytes()),
            )
            .await
        }
    };

    expect_invalid(
        &post("/api/v1/namespaces", json!(["x"])).await,
        "body",
        "namespace as an array",
    );
    assert_eq!(
        call(&hub, "get", "/api/v1/namespaces/x", root, None)
            .await
            .status,
        404,
        "no namespace was created from the array"
    );
    let token = post(
        "/api/v1/clusters/exec-a/bootstrap-tokens",
        json!([60, true]),
    )
    .await;
    expect_invalid(&token, "body", "bootstrap token as an array");
    assert!(token.body.get("token").is_none());

    assert_eq!(
        post("/api/v1/namespaces", json!({ "name": "team" }))
            .await
            .status,
        201
    );
    let spec = json!({ "harnessKind": "embedded-openclaw", "image": "img:1" });
    for (body, field) in [
        (json!(["bot", spec]), "body"),
        (
            json!({ "name": "bot", "spec": ["embedded-openclaw"] }),
            "spec",
        ),
        (
            json!({ "name": "bot", "spec": { "harnessKind": "embedded-openclaw",
                    "image": "img:1", "resources": ["1"] } }),
            "spec.resources",
        ),
        (
            json!({ "name": "bot", "spec": { "harnessKind": "embedded-openclaw",
                    "image": "img:1", "placement": ["exec-a"] } }),
            "spec.placement",
        ),
        (
            json!({ "name": "bot", "spec": { "harnessKind": "dedicated-codex",
                    "image": "img:1", "channels": [["slack", true]] } }),
            "spec.channels[0]",
        ),
    ] {
        expect_invalid(
            &post("/api/v1/namespaces/team/agents", body.clone()).await,
            field,
            &body.to_string(),
        );
    }
    for (path, body) in [
        ("/api/v1/namespaces/team/configurations", json!(["cfg", {}])),
        ("/api/v1/namespaces/team/agents/bot/deploy", json!([1])),
    ] {
        let a = post(path, body).await;
        assert_eq!(a.status, 400, "{path}: {}", a.text);
    }
    let set = call(
        &hub,
        "put",
        "/api/v1/namespaces/team/agents/bot/credentials/model-api-key",
        root,
        Some(br#"["sk-secret"]"#.to_vec()),
    )
    .await;
    assert_eq!(set.status, 400, "{}", set.text);
    assert!(
        !set.text.contains("sk-secret"),
        "a refusal echoes the secret"
    );

    // The object forms still work.
    assert_eq!(
        post(
            "/api/v1/namespaces/team/agents",
            json!({ "name": "bot", "spec": { "harnessKind": "dedicated-codex", "image": "img:1",
                    "resources": { "cpuRequest": "1" }, "placement": {},
                    "channels": [{ "name": "slack" }] } })
        )
        .await
        .status,
        201
    );
    let token = post(
        "/api/v1/clusters/exec-a/bootstrap-tokens",
        json!({ "ttlSeconds": 60, "reenroll": true }),
    )
    .await;
    assert_eq!(token.status, 201, "{}", token.text);
    assert_eq!(token.body["reenroll"], true);
    hub.stop().await;
}

// ---- gRPC codec failures -----------------------------------------------------------

/// Sends raw bytes as a request message, to reach the server's decoder.
#[derive(Clone, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use prost::bytes::Buf;
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

async fn raw_unary(hub: &TestHub, method: &str, bytes: Vec<u8>) -> tonic::Status {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", hub.grpc_addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect gRPC");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let mut request = tonic::Request::new(bytes);
    request.metadata_mut().insert(
        "authorization",
        bearer(&hub.root_token).parse().expect("metadata"),
    );
    let path = format!("/clawfed.admin.v1.AdminService/{method}")
        .parse()
        .expect("path");
    grpc.unary(request, path, RawCodec)
        .await
        .expect_err("the request is refused")
}

/// tonic answers an over-size message `OUT_OF_RANGE` and an undecodable
/// one `INTERNAL`; the error table says `RESOURCE_EXHAUSTED` (REST's 413)
/// and `INVALID_ARGUMENT` (REST's 400). A handler's own answers keep
/// their codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_codec_failures_answer_the_error_table_codes() {
    let mut hub = TestHub::start_with(
        Backend::Sqlite,
        |config| config.api.max_body_bytes = 2048,
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;

    let big = prost::Message::encode_to_vec(&pb::CreateNamespaceRequest {
        name: "x".repeat(4096),
        ..Default::default()
    });
    let status = raw_unary(&hub, "CreateNamespace", big).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("2048"), "{status:?}");

    // Field 1 (name, a string) with a length running past the end, and
    // with bytes that are not UTF-8.
    for bytes in [vec![0x0a, 0x20, b'x'], vec![0x0a, 0x02, 0xff, 0xfe]] {
        let status = raw_unary(&hub, "CreateNamespace", bytes.clone()).await;
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{bytes:?}: {status:?}"
        );
        assert!(status.message().contains("decode"), "{bytes:?}: {status:?}");
    }

    // A well-formed message still reaches the handler, whose refusals
    // keep their own codes.
    let mut g = hub.grpc().await;
    let mut request = tonic::Request::new(pb::CreateNamespaceRequest {
        name: "Not_A_Label".into(),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "authorization",
        bearer(&hub.root_token).parse().expect("metadata"),
    );
    let status = g.create_namespace(request).await.expect_err("bad name");
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = g
        .list_namespaces(pb::ListNamespacesRequest::default())
        .await
        .expect_err("no token");
    assert_eq!(status.code(), Code::Unauthenticated);
    hub.stop().await;
}

// ---- the OpenAPI document --------------------------------------------------------------

async fn served_document(hub: &TestHub) -> Value {
    let a = call(hub, "get", "/openapi.json", None, None).await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

/// The document lists the error answers, the limits the hub enforces, and
/// `AgentRevision.configuration` as what the hub returns (null or an
/// object).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_lists_error_answers_and_limits() {
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let doc = served_document(&hub).await;
    for o in openapi::operations(&doc) {
        let responses = &o.op["responses"];
        let what = format!("{} {}", o.method, o.path);
        for status in ["401", "403", "429"] {
            assert!(responses.get(status).is_some(), "{what}: no {status}");
        }
        if o.path.contains('{') {
            assert!(responses.get("404").is_some(), "{what}: no 404");
            assert!(responses.get("400").is_some(), "{what}: no 400");
        }
        if openapi::request_schema(&o.op).is_some() {
            assert!(responses.get("400").is_some(), "{what}: no 400");
            assert!(responses.get("413").is_some(), "{what}: no 413");
        }
        for (status, answer) in responses.as_object().unwrap() {
            if status.starts_with('4') {
                assert_eq!(
                    answer["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{what} {status}"
                );
            }
        }
    }
    for path in ["/api/v1/audit", "/api/v1/work"] {
        let limit = doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap_or_else(|| panic!("{path}: no limit parameter"));
        assert_eq!(limit["schema"]["minimum"], 1, "{path}");
        assert_eq!(limit["schema"]["maximum"], 1000, "{path}");
    }
    let schemas = &doc["components"]["schemas"];
    let name = &schemas["CreateNamespace"]["properties"]["name"];
    assert_eq!(name["maxLength"], 63);
    assert!(name["pattern"].is_string());
    assert_eq!(
        schemas["CreateAgent"]["properties"]["name"]["maxLength"],
        40
    );
    assert_eq!(
        schemas["CreateBootstrapToken"]["properties"]["ttlSeconds"]["maximum"],
        604800
    );
    let configuration = &schemas["AgentRevision"]["properties"]["configuration"];
    assert!(openapi::validate(&doc, configuration, &Value::Null).is_ok());
    assert!(openapi::validate(&doc, configuration, &json!({ "a": 1 })).is_ok());
    assert!(openapi::validate(&doc, configuration, &json!([1])).is_err());
    hub.stop().await;
}

// ---- the fuzzer -------------------------------------------------------------------------

/// One generated request.
#[derive(Debug, Clone)]
struct Generated {
    op: usize,
    /// Values for the template's `{…}` parameters, in order.
    path: Vec<String>,
    query: Vec<(String, String)>,
    body: Option<Body>,
    auth: Auth,
}

#[derive(Debug, Clone)]
enum Body {
    Json(Value),
    Raw(Vec<u8>),
}

#[derive(Debug, Clone, Copy)]
enum Auth {
    Root,
    TenantViewer,
    None,
    Junk,
}

const WORDS: [&str; 12] = [
    "team",
    "bot",
    "cfg",
    "exec-a",
    "ghost",
    "",
    "Not_A_Label",
    "img:1",
    "embedded-openclaw",
    "model-api-key",
    "<script>",
    "1",
];

fn word() -> BoxedStrategy<String> {
    prop_oneof![
        3 => proptest::sample::select(WORDS.to_vec()).prop_map(str::to_owned),
        1 => "\\PC{0,70}",
        1 => "[a-z0-9-]{1,70}",
    ]
    .boxed()
}

fn integer(min: Option<i64>, max: Option<i64>) -> BoxedStrategy<i64> {
    let lo = min.unwrap_or(-3);
    let hi = max.unwrap_or(3);
    prop_oneof![
        Just(lo),
        Just(hi),
        Just(lo.saturating_sub(1)),
        Just(hi.saturating_add(1)),
        (lo.saturating_sub(2)..=hi.saturating_add(2).min(lo.saturating_add(2000))),
        Just(i64::MAX),
        Just(i64::MIN),
    ]
    .boxed()
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        Some(name) => &doc["components"]["schemas"][name],
        None => schema,
    }
}

/// Values shaped by `schema`: mostly what it describes, with the edges of
/// its limits and now and then a value of another type.
fn value(doc: &Value, schema: &Value, depth: u32) -> BoxedStrategy<Value> {
    let schema = resolve(doc, schema);
    if depth > 6 {
        return Just(Value::Null).boxed();
    }
    if let Some(values) = schema["enum"].as_array() {
        return prop_oneof![
            4 => proptest::sample::select(values.clone()),
            1 => word().prop_map(Value::String),
        ]
        .boxed();
    }
    for keyword in ["oneOf", "anyOf", "allOf"] {
        if let Some(subs) = schema[keyword].as_array() {
            let subs: Vec<_> = subs.iter().map(|s| value(doc, s, depth + 1)).collect();
            return Union::new(subs).boxed();
        }
    }
    let types: Vec<String> = match &schema["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => vec!["object".into()],
    };
    let alternatives: Vec<BoxedStrategy<Value>> = types
        .iter()
        .map(|t| match t.as_str() {
            "null" => Just(Value::Null).boxed(),
            "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
            "integer" => integer(schema["minimum"].as_i64(), schema["maximum"].as_i64())
                .prop_map(Value::from)
                .boxed(),
            "number" => any::<f64>().prop_map(|n| json!(n)).boxed(),
            "string" => {
                let max = schema["maxLength"].as_u64().map(|m| m as usize);
                match max {
                    Some(max) => prop_oneof![
                        4 => word(),
                        1 => Just("a".repeat(max)),
                        1 => Just("a".repeat(max + 1)),
                    ]
                    .prop_map(Value::String)
                    .boxed(),
                    None => word().prop_map(Value::String).boxed(),
                }
            }
            "array" => proptest::collection::vec(value(doc, &schema["items"], depth + 1), 0..3)
                .prop_map(Value::Array)
                .boxed(),
            _ => object(doc, schema, depth),
        })
        .collect();
    prop_oneof![
        8 => Union::new(alternatives),
        1 => prop_oneof![
            Just(json!(["x"])),
            Just(json!(1)),
            Just(json!("x")),
            Just(json!(null)),
            Just(json!({})),
        ],
    ]
    .boxed()
}

fn object(doc: &Value, schema: &Value, depth: u32) -> BoxedStrategy<Value> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut fields: Vec<BoxedStrategy<Option<(String, Value)>>> = Vec::new();
    for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
        let name = name.clone();
        let v = value(doc, sub, depth + 1);
        let present = if required.contains(&name.as_str()) {
            prop_oneof![9 => Just(true), 1 => Just(false)].boxed()
        } else {
            any::<bool>().boxed()
        };
        fields.push(
            (present, v)
                .prop_map(move |(present, v)| present.then(|| (name.clone(), v)))
                .boxed(),
        );
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        fields.push(proptest::option::of(("[a-z/.]{1,12}", value(doc, extra, depth + 1))).boxed());
    } else {
        // An unknown field, now and then.
        fields.push(
            prop_oneof![9 => Just(None), 1 => Just(Some(("colour".to_owned(), json!("red"))))]
                .boxed(),
        );
    }
    fields
        .prop_map(|fields| Value::Object(fields.into_iter().flatten().collect()))
        .boxed()
}

/// Turns the `pick`-th object inside `v` (itself included) into the array
/// of its values: the positional form serde would otherwise accept.
fn arrayify(v: &mut Value, pick: &mut usize) -> bool {
    if let Value::Object(map) = v {
        if *pick == 0 {
            *v = Value::Array(map.values().cloned().collect());
            return true;
        }
        *pick -= 1;
        for child in map.values_mut() {
            if arrayify(child, pick) {
                return true;
            }
        }
    }
    false
}

fn param_value(doc: &Value, name: &str, schema: &Value) -> BoxedStrategy<String> {
    let known: Vec<&str> = match name {
        "ns" | "namespace" => vec!["team", "ghost", "Not_A_Label"],
        "name" => vec!["bot", "cfg", "exec-a", "ghost"],
        "number" => vec!["1", "2", "0", "-1", "abc"],
        "kind" => vec!["model-api-key", "service-account", "bogus"],
        "id" => vec!["00000000-0000-0000-0000-000000000000", "x"],
        "state" => vec!["pending", "claimed", "done", "failed", "bogus"],
        _ => vec![],
    };
    let shaped = value(doc, schema, 0).prop_map(|v| match v {
        Value::String(s) => s,
        other => other.to_string(),
    });
    if known.is_empty() {
        return shaped.boxed();
    }
    prop_oneof![
        3 => proptest::sample::select(known).prop_map(str::to_owned),
        1 => shaped,
    ]
    .boxed()
}

fn request(doc: &Value, ops: &[openapi::Operation], i: usize) -> BoxedStrategy<Generated> {
    let o = &ops[i];
    let params: Vec<Value> = o.op["parameters"].as_array().cloned().unwrap_or_default();
    let path_names = template_names(&o.path);
    let path: Vec<BoxedStrategy<String>> = path_names
        .iter()
        .map(|name| {
            let schema = params
                .iter()
                .find(|p| p["name"] == name.as_str() && p["in"] == "path")
                .map(|p| p["schema"].clone())
                .unwrap_or(json!({ "type": "string" }));
            param_value(doc, name, &schema)
        })
        .collect();
    let query: Vec<BoxedStrategy<Option<(String, String)>>> = params
        .iter()
        .filter(|p| p["in"] == "query")
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_owned();
            proptest::option::of(param_value(doc, &name, &p["schema"]))
                .prop_map(move |v| v.map(|v| (name.clone(), v)))
                .boxed()
        })
        .collect();
    let query = (
        query,
        proptest::option::of(Just(("colour".to_owned(), "red".to_owned()))),
    )
        .prop_map(|(q, extra)| q.into_iter().flatten().chain(extra).collect::<Vec<_>>());
    let body: BoxedStrategy<Option<Body>> = match openapi::request_schema(&o.op) {
        None => Just(None).boxed(),
        Some(schema) => {
            let shaped = value(doc, schema, 0);
            prop_oneof![
                6 => shaped.clone().prop_map(|v| Some(Body::Json(v))),
                2 => (shaped, 0usize..6).prop_map(|(mut v, mut pick)| {
                    arrayify(&mut v, &mut pick);
                    Some(Body::Json(v))
                }),
                1 => Just(None),
                1 => proptest::collection::vec(any::<u8>(), 0..40)
                    .prop_map(|b| Some(Body::Raw(b))),
            ]
            .boxed()
        }
    };
    let auth = prop_oneof![
        12 => Just(Auth::Root),
        3 => Just(Auth::TenantViewer),
        1 => Just(Auth::None),
        1 => Just(Auth::Junk),
    ];
    (path, query, body, auth)
        .prop_map(move |(path, query, body, auth)| Generated {
            op: i,
            path,
            query,
            body,
            auth,
        })
        .boxed()
}

/// Rules no JSON Schema of one field states, each refused with 400 naming
/// the field, as (field prefix, words of the reason): a harness kind's
/// execution mode (embedded-openclaw runs ordinary, dedicated-openclaw
/// through a provider); channels (enabled ones only on a dedicated harness,
/// names unique in the Agent); a configuration and a revision to deploy
/// from (or to diagnose) that exist; label keys clawfed sets itself; a
/// label key prefix longer than 253 characters.
const RULES_BEYOND_THE_SCHEMA: [(&str, &str); 7] = [
    ("spec.executionMode", ""),
    ("spec.channels[", ""),
    ("spec.configuration", "does not exist"),
    ("fromRevision", "has no revision"),
    ("revision", "has no revision"),
    ("spec.requirementLabels[", "clawfed sets itself"),
    ("spec.requirementLabels[", "prefix must be a DNS subdomain"),
];

/// Whether a 400 answer names one of [`RULES_BEYOND_THE_SCHEMA`].
fn beyond_the_schema(answer: &Value) -> bool {
    let field = answer["error"]["field"].as_str().unwrap_or_default();
    let reason = answer["error"]["message"].as_str().unwrap_or_default();
    RULES_BEYOND_THE_SCHEMA
        .iter()
        .any(|(prefix, words)| field.starts_with(prefix) && reason.contains(words))
}

/// Whether every part of `g` is allowed by the document: its path and
/// query parameters by their schemas, its body (when the operation has
/// one) by the request schema.
fn schema_valid(doc: &Value, o: &openapi::Operation, g: &Generated) -> bool {
    let params: Vec<Value> = o.op["parameters"].as_array().cloned().unwrap_or_default();
    let param_ok = |name: &str, place: &str, v: &str| {
        let Some(p) = params
            .iter()
            .find(|p| p["name"] == name && p["in"] == place)
        else {
            // Not a documented parameter: the server refuses unknown query
            // parameters (a misspelt filter must not list everything), as
            // the document's description says.
            return false;
        };
        let schema = &p["schema"];
        let typed = match resolve(doc, schema)["type"].as_str() {
            Some("integer") => match v.parse::<i64>() {
                Ok(n) => json!(n),
                Err(_) => return false,
            },
            Some("boolean") => match v.parse::<bool>() {
                Ok(b) => json!(b),
                Err(_) => return false,
            },
            _ => json!(v),
        };
        openapi::validate(doc, schema, &typed).is_ok()
    };
    let path_ok = template_names(&o.path)
        .iter()
        .zip(&g.path)
        .all(|(name, v)| param_ok(name, "path", if v.is_empty() { "x" } else { v }));
    let query_ok = g.query.iter().all(|(k, v)| param_ok(k, "query", v));
    let body_ok = match (openapi::request_schema(&o.op), &g.body) {
        (None, _) => true,
        (Some(schema), Some(Body::Json(v))) => openapi::validate(doc, schema, v).is_ok(),
        (Some(_), None) => !o.op["requestBody"]["required"].as_bool().unwrap_or(false),
        (Some(_), Some(Body::Raw(_))) => false,
    };
    path_ok && query_ok && body_ok
}

fn template_names(template: &str) -> Vec<String> {
    template
        .split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

/// Percent-encodes everything but unreserved characters. A segment of
/// only dots (`.`, `..`) is encoded whole: the HTTP client removes such
/// dot segments from the path (RFC 3986), which would send the request to
/// another route (`/namespaces/./agents` -> `/namespaces/agents`, 405).
fn encode(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b == b'.') {
        return "%2E".repeat(s.len());
    }
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn url_of(o: &openapi::Operation, g: &Generated) -> String {
    let mut path = o.path.clone();
    for (name, v) in template_names(&o.path).iter().zip(&g.path) {
        // An empty segment would route elsewhere; that is not this operation.
        let v = if v.is_empty() { "x" } else { v };
        path = path.replace(&format!("{{{name}}}"), &encode(v));
    }
    if !g.query.is_empty() {
        let q: Vec<String> = g
            .query
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        path = format!("{path}?{}", q.join("&"));
    }
    path
}

/// Every operation of the served document, fed generated requests: valid
/// and invalid parameters and bodies, several callers. The hub never
/// answers 5xx; every answer's status is documented for the operation and
/// its body matches the documented schema; a JSON body the document's
/// request schema refuses is refused (4xx), never acted on.
#[test]
fn generated_requests_keep_the_served_openapi_document_honest() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (hub, doc, viewer) = rt.block_on(async {
        let hub = TestHub::start(Backend::Sqlite).await;
        let root = bearer(&hub.root_token);
        let root = Some(root.as_str());
        let setup = [
            ("post", "/api/v1/namespaces", json!({ "name": "team" })),
            (
                "post",
                "/api/v1/namespaces/team/configurations",
                json!({ "name": "cfg", "data": { "k": "v" } }),
            ),
            (
                "post",
                "/api/v1/namespaces/team/agents",
                json!({ "name": "bot", "spec": { "harnessKind": "embedded-openclaw",
                        "image": "img:1" } }),
            ),
            (
                "post",
                "/api/v1/namespaces/team/agents/bot/deploy",
                json!({}),
            ),
            (
                "post",
                "/api/v1/clusters/exec-a/bootstrap-tokens",
                json!({ "ttlSeconds": 60 }),
            ),
        ];
        for (method, path, body) in setup {
            let a = call(
                &hub,
                method,
                path,
                root,
                Some(body.to_string().into_bytes()),
            )
            .await;
            assert!(a.status < 300, "{path}: {}", a.text);
        }
        let viewer = hub.token("viewer", Some("team"), Role::Viewer).await;
        let doc = served_document(&hub).await;
        (hub, doc, viewer)
    });
    let ops = openapi::operations(&doc);
    assert!(ops.len() >= 25, "only {} operations", ops.len());
    let strategies: Vec<BoxedStrategy<Generated>> =
        (0..ops.len()).map(|i| request(&doc, &ops, i)).collect();
    let strategy = Union::new(strategies);

    let cases = std::env::var("CLAWFED_API_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1500);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let seen: RefCell<BTreeMap<String, usize>> = RefCell::default();
    let refused_valid: RefCell<Vec<String>> = RefCell::default();
    let allowed_by_status: RefCell<BTreeMap<u16, usize>> = RefCell::default();
    let result = runner.run(&strategy, |g| {
        let o = &ops[g.op];
        let url = url_of(o, &g);
        let token = match g.auth {
            Auth::Root => Some(bearer(&hub.root_token)),
            Auth::TenantViewer => Some(bearer(&viewer)),
            Auth::None => None,
            Auth::Junk => Some("Bearer cfd_junk".to_owned()),
        };
        let bytes = g.body.as_ref().map(|b| match b {
            Body::Json(v) => v.to_string().into_bytes(),
            Body::Raw(r) => r.clone(),
        });
        let a = rt.block_on(call(&hub, &o.method, &url, token.as_deref(), bytes));
        let what = format!(
            "{} {url} ({:?}) -> {}: {}",
            o.method, g.body, a.status, a.text
        );
        *seen
            .borrow_mut()
            .entry(format!("{} {} {}", o.method, o.path, a.status))
            .or_default() += 1;
        if a.status >= 500 {
            return Err(TestCaseError::fail(format!("server error: {what}")));
        }
        let schema = openapi::response_schema(&o.op, a.status)
            .map_err(|e| TestCaseError::fail(format!("{e}: {what}")))?;
        if let Some(schema) = schema {
            openapi::validate(&doc, schema, &a.body).map_err(|e| {
                TestCaseError::fail(format!("answer breaks its schema: {e}: {what}"))
            })?;
        }
        if let (Some(Body::Json(v)), Some(schema)) = (&g.body, openapi::request_schema(&o.op))
            && openapi::validate(&doc, schema, v).is_err()
            && a.status < 400
        {
            return Err(TestCaseError::fail(format!(
                "a body the document refuses was accepted: {what}"
            )));
        }
        // The reverse (issue 31 item 16): a request the document allows in
        // every part is not refused as invalid. Counted, not failed at
        // once, so the run reports every such case.
        let allowed = matches!(g.auth, Auth::Root) && schema_valid(&doc, o, &g);
        if allowed {
            *allowed_by_status.borrow_mut().entry(a.status).or_default() += 1;
        }
        if a.status == 400 && allowed && !beyond_the_schema(&a.body) {
            refused_valid.borrow_mut().push(what);
        }
        Ok(())
    });
    let mut hub = hub;
    rt.block_on(hub.stop());
    if let Err(e) = result {
        panic!("{e}");
    }
    let refused_valid = refused_valid.into_inner();
    eprintln!(
        "requests the document allows in every part, by answer status: {:?}",
        allowed_by_status.into_inner()
    );
    assert!(
        refused_valid.is_empty(),
        "{} of {cases} requests the document allows were refused with 400:\n{}",
        refused_valid.len(),
        refused_valid.join("\n")
    );
    // The run reached every operation, and beyond the refusals.
    let seen = seen.into_inner();
    for o in &ops {
        let prefix = format!("{} {} ", o.method, o.path);
        assert!(
            seen.keys().any(|k| k.starts_with(&prefix)),
            "{prefix}was never called"
        );
    }
    assert!(
        seen.keys()
            .any(|k| k.ends_with(" 200") || k.ends_with(" 201")),
        "no request succeeded: {seen:?}"
    );
    eprintln!("answers by operation and status: {seen:#?}");
}

// ---- REST/gRPC parity ------------------------------------------------------------------------

/// Every REST operation and its `clawfed.admin.v1.AdminService` twin.
const TWINS: &[(&str, &str)] = &[
    ("get /api/v1/namespaces", "ListNamespaces"),
    ("post /api/v1/namespaces", "CreateNamespace"),
    ("get /api/v1/namespaces/{ns}", "GetNamespace"),
    ("delete /api/v1/namespaces/{ns}", "DeleteNamespace"),
    ("get /api/v1/namespaces/{ns}/quota", "GetQuota"),
    (
        "get /api/v1/namespaces/{ns}/configurations",
        "ListConfigurations",
    ),
    (
        "post /api/v1/namespaces/{ns}/configurations",
        "CreateConfiguration",
    ),
    (
        "get /api/v1/namespaces/{ns}/configurations/{name}",
        "GetConfiguration",
    ),
    (
        "put /api/v1/namespaces/{ns}/configurations/{name}",
        "UpdateConfiguration",
    ),
    (
        "delete /api/v1/namespaces/{ns}/configurations/{name}",
        "DeleteConfiguration",
    ),
    ("get /api/v1/namespaces/{ns}/agents", "ListAgents"),
    ("post /api/v1/namespaces/{ns}/agents", "CreateAgent"),
    ("get /api/v1/namespaces/{ns}/agents/{name}", "GetAgent"),
    ("put /api/v1/namespaces/{ns}/agents/{name}", "UpdateAgent"),
    (
        "delete /api/v1/namespaces/{ns}/agents/{name}",
        "DeleteAgent",
    ),
    (
        "post /api/v1/namespaces/{ns}/agents/{name}/deploy",
        "Deploy",
    ),
    ("post /api/v1/namespaces/{ns}/agents/{name}/stop", "Stop"),
    (
        "get /api/v1/namespaces/{ns}/agents/{name}/revisions",
        "ListRevisions",
    ),
    (
        "get /api/v1/namespaces/{ns}/agents/{name}/revisions/{number}",
        "GetRevision",
    ),
    (
        "get /api/v1/namespaces/{ns}/agents/{name}/credentials",
        "ListAgentCredentials",
    ),
    (
        "put /api/v1/namespaces/{ns}/agents/{name}/credentials/{kind}",
        "SetAgentCredential",
    ),
    (
        "delete /api/v1/namespaces/{ns}/agents/{name}/credentials/{kind}",
        "DeleteAgentCredential",
    ),
    (
        "get /api/v1/namespaces/{ns}/agents/{name}/revisions/{number}/credentials",
        "ListRevisionCredentials",
    ),
    (
        "get /api/v1/namespaces/{ns}/agents/{name}/diagnose",
        "DiagnoseAgent",
    ),
    (
        "post /api/v1/namespaces/{ns}/agents/{name}/chat",
        "ChatAgent",
    ),
    ("get /api/v1/clusters", "ListClusters"),
    ("get /api/v1/clusters/{name}", "GetCluster"),
    (
        "post /api/v1/clusters/{name}/bootstrap-tokens",
        "CreateBootstrapToken",
    ),
    ("post /api/v1/clusters/{name}/revoke", "RevokeCluster"),
    ("post /api/v1/clusters/{name}/approve", "ApproveCluster"),
    ("post /api/v1/clusters/{name}/cordon", "CordonCluster"),
    ("post /api/v1/clusters/{name}/uncordon", "UncordonCluster"),
    ("post /api/v1/clusters/{name}/drain", "DrainCluster"),
    ("get /api/v1/fleet", "GetFleetSummary"),
    ("get /api/v1/watch", "Watch"),
    ("get /api/v1/audit", "ListAuditEvents"),
    ("get /api/v1/audit/stream", "StreamAuditEvents"),
    ("get /api/v1/work", "ListWork"),
    ("get /api/v1/work/{id}", "GetWork"),
];

/// The methods of `clawfed.admin.v1.AdminService`, from the descriptors
/// the proto crate was generated from.
fn admin_methods() -> Vec<String> {
    let set: prost_types::FileDescriptorSet =
        prost::Message::decode(clawfed_proto::FILE_DESCRIPTOR_SET).expect("descriptor set");
    set.file
        .iter()
        .filter(|f| f.package() == "clawfed.admin.v1")
        .flat_map(|f| &f.service)
        .filter(|s| s.name() == "AdminService")
        .flat_map(|s| &s.method)
        .map(|m| m.name().to_owned())
        .collect()
}

/// Every REST operation the hub serves has a gRPC twin and every gRPC
/// method a REST twin: the served OpenAPI operations and the service
/// descriptor are both checked against one table, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rest_operation_has_a_grpc_twin_and_back() {
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let doc = served_document(&hub).await;
    hub.stop().await;
    let twins: BTreeMap<&str, &str> = TWINS.iter().copied().collect();
    assert_eq!(
        twins.len(),
        TWINS.len(),
        "the table lists an operation twice"
    );
    let rest: Vec<String> = openapi::operations(&doc)
        .iter()
        .map(|o| format!("{} {}", o.method, o.path))
        .collect();
    let grpc = admin_methods();
    assert!(grpc.len() >= 30, "descriptor lists only {grpc:?}");

    let rest_only: Vec<&String> = rest
        .iter()
        .filter(|r| !twins.contains_key(r.as_str()))
        .collect();
    assert!(
        rest_only.is_empty(),
        "REST operations without a gRPC twin: {rest_only:?}"
    );
    let grpc_only: Vec<&String> = grpc
        .iter()
        .filter(|m| !twins.values().any(|t| t == m))
        .collect();
    assert!(
        grpc_only.is_empty(),
        "gRPC methods without a REST twin: {grpc_only:?}"
    );
    for (op, method) in &twins {
        assert!(
            rest.iter().any(|r| r == op),
            "{op} (twin of {method}) is not served"
        );
        assert!(
            grpc.iter().any(|m| m == method),
            "{method} (twin of {op}) is not in AdminService"
        );
    }
    assert_eq!(rest.len(), twins.len(), "a REST operation is listed twice");
    assert_eq!(grpc.len(), twins.len(), "a gRPC method is listed twice");
}

/// Cluster approval over gRPC answers like REST: unknown names are
/// NOT_FOUND, tenants are denied, a name is required.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_approve_cluster_is_the_rest_twin() {
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let mut g = hub.grpc().await;
    let with = |token: &str, name: &str| {
        let mut r = tonic::Request::new(pb::ApproveClusterRequest { name: name.into() });
        r.metadata_mut()
            .insert("authorization", bearer(token).parse().expect("metadata"));
        r
    };
    let root = hub.root_token.clone();
    let status = g
        .approve_cluster(with(&root, "ghost"))
        .await
        .expect_err("unknown");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let status = g
        .approve_cluster(with(&root, ""))
        .await
        .expect_err("no name");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let created = call(
        &hub,
        "post",
        "/api/v1/namespaces",
        Some(&bearer(&root)),
        Some(br#"{"name":"team"}"#.to_vec()),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let viewer = hub.token("viewer", Some("team"), Role::Viewer).await;
    let status = g
        .approve_cluster(with(&viewer, "ghost"))
        .await
        .expect_err("viewer");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let rest = call(
        &hub,
        "post",
        "/api/v1/clusters/ghost/approve",
        Some(&bearer(&root)),
        None,
    )
    .await;
    assert_eq!(rest.status, 404, "{}", rest.text);
    hub.stop().await;
}
