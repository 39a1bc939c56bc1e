//! The OpenClaw runtime's config file of a revision: the Agent's frozen
//! Configuration (OpenClaw's own config document) with the keys clawfed
//! owns set over it. Pure: no I/O.
//!
//! clawfed owns what it must control to run the workload:
//! - `gateway.mode` (`local`), `gateway.port` (the Harness port),
//!   `gateway.bind` (`lan`: the Pod's address), `gateway.auth` (`token`
//!   mode; the token comes from the environment, `OPENCLAW_GATEWAY_TOKEN`,
//!   never the file) and `gateway.http.endpoints.chatCompletions.enabled`
//!   (the activation's model turn uses it);
//! - `update.checkOnStart` and `models.catalogRefresh.enabled` (`false`:
//!   nothing is fetched from outside at start, for air-gapped clusters);
//! - `models.providers.<id>.apiKey` of every provider: the Agent's managed
//!   model credential (`${CLAWFED_MODEL_API_KEY}`, substituted by the runtime from
//!   its environment). A key in the document is a secret in the wrong place.
//!
//! A Configuration that sets an owned key to another value is refused at
//! deploy ([`conflicts`]), naming the key; the same value is accepted.

use serde_json::{Map, Value};

use clawfed_proto::work::credential::MODEL_API_KEY;

/// One owned key a Configuration sets to another value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The dotted key, e.g. `gateway.port`.
    pub key: String,
    /// What clawfed sets it to (JSON).
    pub owned: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is set by clawfed (to {}); remove it from the configuration",
            self.key, self.owned
        )
    }
}

/// The owned keys and their values for a Harness serving on `port`.
fn owned(port: i32) -> Vec<(Vec<&'static str>, Value)> {
    vec![
        (vec!["gateway", "mode"], Value::from("local")),
        (vec!["gateway", "port"], Value::from(port)),
        (vec!["gateway", "bind"], Value::from("lan")),
        (
            vec!["gateway", "auth"],
            serde_json::json!({ "mode": "token" }),
        ),
        (
            vec!["gateway", "http", "endpoints", "chatCompletions", "enabled"],
            Value::from(true),
        ),
        (vec!["update", "checkOnStart"], Value::from(false)),
        (
            vec!["models", "catalogRefresh", "enabled"],
            Value::from(false),
        ),
    ]
}

fn managed_key() -> Value {
    Value::from(format!("${{{MODEL_API_KEY}}}"))
}

fn get<'a>(doc: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, k| v.get(*k))
}

fn set(doc: &mut Value, path: &[&str], value: Value) {
    let mut cur = doc;
    for key in &path[..path.len() - 1] {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .map(|m| {
                m.entry(key.to_string())
                    .or_insert(Value::Object(Map::new()))
            })
            .expect("made an object above");
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    if let (Some(m), Some(last)) = (cur.as_object_mut(), path.last()) {
        m.insert(last.to_string(), value);
    }
}

fn providers(doc: &Value) -> Vec<String> {
    get(doc, &["models", "providers"])
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The owned keys `configuration` sets to another value than clawfed's.
pub fn conflicts(configuration: &Value, port: i32) -> Vec<Conflict> {
    let mut out: Vec<Conflict> = owned(port)
        .into_iter()
        .filter_map(|(path, value)| {
            let given = get(configuration, &path)?;
            (given != &value).then(|| Conflict {
                key: path.join("."),
                owned: value.to_string(),
            })
        })
        .collect();
    for id in providers(configuration) {
        let path = ["models", "providers", id.as_str(), "apiKey"];
        if let Some(given) = get(configuration, &path)
            && given != &managed_key()
        {
            out.push(Conflict {
                key: path.join("."),
                owned: managed_key().to_string(),
            });
        }
    }
    out
}

/// Where a dedicated Codex Gateway's Codex plugin reaches its app-server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppServerLink<'a> {
    /// `ws(s)://...`: the hub's tunnel ingress at
    /// [`clawfed_proto::tunnel::harness_upgrade_path`], or the Harness
    /// itself.
    pub url: &'a str,
}

/// The environment variable with the app-server's capability token.
pub const APP_SERVER_TOKEN_VAR: &str = "CODEX_APP_SERVER_TOKEN";

/// The model endpoint a dedicated Codex Agent's Harness uses: the
/// Configuration's `models.providers.openai.baseUrl` (Codex's
/// `openai_base_url`). The Gateway's config never carries it: Codex, not
/// the Gateway, calls the model.
pub fn codex_model_base_url(configuration: &Value) -> Option<String> {
    get(configuration, &["models", "providers", "openai", "baseUrl"])
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The config of a dedicated Agent's Gateway (the OpenClaw runtime in the
/// control cluster, serving on `port`): as [`render`], without any model
/// credential (a dedicated Gateway holds none: every provider's `apiKey`
/// goes), and, with `app_server`, its Codex plugin on: Codex is the
/// OpenAI provider's runtime (`agentRuntime.id: codex`, fail closed) and
/// the plugin's app-server is the Agent's Harness, reached over WebSocket
/// at `app_server.url` with the Agent's capability token (which the hub's
/// tunnel ingress checks too). Nothing in the plugin's connection settings
/// changes between revisions: the plugin keys each conversation's Codex
/// thread by them (secrets hashed), so a change would start every
/// conversation over. The installation's trusted proxy CIDRs
/// (`network.gatewayTrustedProxyCidrs`), when it gives any, are the
/// gateway's `gateway.trustedProxies`: the same sources its NetworkPolicy
/// admits are the ones whose forwarded client addresses it believes.
pub fn render_gateway(
    configuration: &Value,
    port: i32,
    trusted_proxies: &[String],
    app_server: Option<AppServerLink>,
) -> Value {
    let mut doc = render(configuration, port);
    if !trusted_proxies.is_empty() {
        set(
            &mut doc,
            &["gateway", "trustedProxies"],
            Value::from(trusted_proxies.to_vec()),
        );
    }
    for id in providers(&doc) {
        if let Some(p) = doc["models"]["providers"][&id].as_object_mut() {
            p.remove("apiKey");
        }
    }
    if let Some(link) = app_server {
        set(
            &mut doc,
            &["models", "providers", "openai"],
            serde_json::json!({ "agentRuntime": { "id": "codex" } }),
        );
        set(
            &mut doc,
            &["plugins", "entries", "codex", "enabled"],
            Value::from(true),
        );
        // The Gateway's workspace path does not exist on the Harness: the
        // plugin maps it into the Harness' own (the Agent's claim there).
        let app = serde_json::json!({
            "transport": "websocket",
            "url": link.url,
            "authToken": format!("${{{APP_SERVER_TOKEN_VAR}}}"),
            "remoteWorkspaceRoot": clawfed_proto::work::codex::WORKSPACE_ROOT,
        });
        set(
            &mut doc,
            &["plugins", "entries", "codex", "config", "appServer"],
            app,
        );
    }
    doc
}

/// The runtime's config: `configuration` (a JSON object, or `null` for
/// none) with every owned key set over it. Owned keys win even where
/// [`conflicts`] would refuse, so a document admitted before a key became
/// owned still renders to a config clawfed controls.
pub fn render(configuration: &Value, port: i32) -> Value {
    let mut doc = match configuration {
        Value::Object(_) => configuration.clone(),
        _ => Value::Object(Map::new()),
    };
    for (path, value) in owned(port) {
        set(&mut doc, &path, value);
    }
    for id in providers(&doc) {
        set(
            &mut doc,
            &["models", "providers", &id, "apiKey"],
            managed_key(),
        );
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_codex_gateway_gets_the_plugin_on_its_harness_and_no_model_credential() {
        let user = json!({
            "agents": {"defaults": {"model": "openai/gpt-5.4"}},
            "models": {"providers": {
                "openai": {"baseUrl": "http://198.18.0.9:8000/v1", "apiKey": "${CLAWFED_MODEL_API_KEY}"},
                "other": {"baseUrl": "http://198.18.0.9:9000/v1"}
            }},
            "plugins": {"entries": {"codex": {"config": {"sessionCatalog": {"enabled": false}}}}}
        });
        assert_eq!(
            codex_model_base_url(&user).as_deref(),
            Some("http://198.18.0.9:8000/v1")
        );
        let link = AppServerLink {
            url: "wss://198.18.0.1:7443/_clawfed/harness/team/a1",
        };
        let doc = render_gateway(&user, 18789, &[], Some(link));
        assert_eq!(doc["gateway"]["port"], 18789);
        assert_eq!(
            doc["models"]["providers"]["openai"],
            json!({"agentRuntime": {"id": "codex"}}),
            "the model endpoint is the Harness', not the Gateway's"
        );
        assert!(doc["models"]["providers"]["other"].get("apiKey").is_none());
        assert!(!doc.to_string().contains("CLAWFED_MODEL_API_KEY"), "{doc}");
        let codex = &doc["plugins"]["entries"]["codex"];
        assert_eq!(codex["enabled"], true);
        assert_eq!(
            codex["config"]["sessionCatalog"]["enabled"], false,
            "the user's keys stay"
        );
        assert_eq!(
            codex["config"]["appServer"],
            json!({
                "transport": "websocket",
                "url": "wss://198.18.0.1:7443/_clawfed/harness/team/a1",
                "authToken": "${CODEX_APP_SERVER_TOKEN}",
                "remoteWorkspaceRoot": "/workspace"
            })
        );
        // Another dedicated Gateway: no plugin, still no credential.
        let plain = render_gateway(&user, 18789, &["198.18.7.0/24".to_string()], None);
        assert_eq!(
            plain["gateway"]["trustedProxies"],
            json!(["198.18.7.0/24"]),
            "the installation's trusted proxies"
        );
        assert!(doc["gateway"].get("trustedProxies").is_none());
        assert!(
            plain["plugins"]["entries"]["codex"]
                .get("enabled")
                .is_none()
        );
        assert!(
            plain["models"]["providers"]["openai"]
                .get("apiKey")
                .is_none()
        );
    }

    #[test]
    fn the_owned_keys_are_set_over_the_users_document() {
        let user = json!({
            "agents": {"defaults": {"model": {"primary": "standin/m1"}}},
            "models": {"providers": {"standin": {
                "baseUrl": "http://198.18.176.9:8000/v1", "api": "openai-completions",
                "models": [{"id": "m1", "name": "m1"}]
            }}},
            "gateway": {"http": {"endpoints": {"responses": {"enabled": true}}}}
        });
        let doc = render(&user, 18789);
        assert_eq!(doc["gateway"]["port"], 18789);
        assert_eq!(doc["gateway"]["mode"], "local");
        assert_eq!(doc["gateway"]["bind"], "lan");
        assert_eq!(doc["gateway"]["auth"], json!({"mode": "token"}));
        assert_eq!(
            doc["gateway"]["http"]["endpoints"],
            json!({"responses": {"enabled": true}, "chatCompletions": {"enabled": true}}),
            "the user's sibling keys stay"
        );
        assert_eq!(doc["update"]["checkOnStart"], false);
        assert_eq!(doc["models"]["catalogRefresh"]["enabled"], false);
        assert_eq!(
            doc["models"]["providers"]["standin"]["apiKey"],
            "${CLAWFED_MODEL_API_KEY}"
        );
        assert_eq!(
            doc["models"]["providers"]["standin"]["baseUrl"],
            "http://198.18.176.9:8000/v1"
        );
        assert_eq!(doc["agents"], user["agents"]);
        assert!(conflicts(&user, 18789).is_empty());
    }

    #[test]
    fn no_configuration_renders_the_owned_keys_alone() {
        let doc = render(&Value::Null, 8080);
        assert_eq!(doc["gateway"]["port"], 8080);
        assert!(doc.get("agents").is_none());
    }

    #[test]
    fn an_owned_key_set_otherwise_is_a_conflict_naming_it() {
        let user = json!({
            "gateway": {"port": 9999, "mode": "local", "auth": {"mode": "none"}},
            "update": {"checkOnStart": true},
            "models": {"providers": {"p": {"apiKey": "sk-live-secret"}}}
        });
        let keys: Vec<String> = conflicts(&user, 18789).into_iter().map(|c| c.key).collect();
        assert_eq!(
            keys,
            [
                "gateway.port",
                "gateway.auth",
                "update.checkOnStart",
                "models.providers.p.apiKey"
            ]
        );
        let c = &conflicts(&json!({"gateway": {"bind": "loopback"}}), 1)[0];
        assert_eq!(
            c.to_string(),
            "gateway.bind is set by clawfed (to \"lan\"); remove it from the configuration"
        );
        // Owned keys win in the rendered file anyway.
        let doc = render(&user, 18789);
        assert_eq!(doc["gateway"]["port"], 18789);
        assert_eq!(
            doc["models"]["providers"]["p"]["apiKey"],
            "${CLAWFED_MODEL_API_KEY}"
        );
    }

    #[test]
    fn a_non_object_under_an_owned_path_is_replaced() {
        let doc = render(&json!({"gateway": "x", "models": 3}), 1);
        assert_eq!(doc["gateway"]["port"], 1);
        assert_eq!(doc["models"]["catalogRefresh"]["enabled"], false);
    }
}
