//! Link message decoders fed arbitrary bytes and mutated valid encodings:
//! none panics, and what decodes is sound.
//!
//! - `WorkSpec::decode` with any kind string (the five kinds and others):
//!   a decoded spec has the kind asked for and survives encode/decode
//!   unchanged; work targets (`work::target::Target`) parse and print back.
//! - prost decoding of `SpokeMessage`, `HubMessage` and `TunnelFrame`: a
//!   decoded message re-encodes to the same message; a decoded `Work` is
//!   handed on to `WorkSpec::decode` and `Target` as the spoke does.
//! - `startup::parse`/`validate`: an accepted status accounts for every
//!   admitted selection exactly once, names no other, belongs to the
//!   expected revision and runtime instance, and is sorted.
//! - `diagnostics::bound`: at most `MAX_CHECKS` checks, each with a valid
//!   name, a closed status and a single-line detail of bounded length.

use std::collections::BTreeSet;
use std::str::FromStr;

use clawfed_proto::diagnostics::{self, DiagnosticsBody, PublishedCheck};
use clawfed_proto::link::v1 as pb;
use clawfed_proto::startup::{self, Expected, PublishedWarning, StartupStatus, WarningCode};
use clawfed_proto::work::target::Target;
use clawfed_proto::work::{WorkKind, WorkSpec};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use prost::Message;

use super::{Property, report};

/// `WorkSpec::decode` and work targets.
pub const WORK_SPEC: Property = Property {
    name: "decode_work_spec",
    suite_cases: 1024,
    run: run_work_spec,
};

/// prost decoding of the link's stream messages.
pub const LINK_MESSAGES: Property = Property {
    name: "decode_link_messages",
    suite_cases: 1024,
    run: run_link_messages,
};

/// The plugin startup status validator.
pub const STARTUP_STATUS: Property = Property {
    name: "decode_startup_status",
    suite_cases: 1024,
    run: run_startup,
};

/// The diagnostics bounds.
pub const DIAGNOSTICS: Property = Property {
    name: "decode_diagnostics",
    suite_cases: 512,
    run: run_diagnostics,
};

/// Valid specs of every kind (mutation seeds; a test checks they decode).
pub const WORK_SEEDS: [(&str, &str); 5] = [
    (
        "namespace.ensure",
        r#"{"tenant":"team-a","namespaceId":"0190f5a2","adopt":"payments","quota":{"pods":"20","requests.cpu":"8"}}"#,
    ),
    (
        "namespace.delete",
        r#"{"tenant":"team-a","namespaceId":"0190f5a2","dataPlaneNamespace":"oce-ba7816bf8f01cfe"}"#,
    ),
    (
        "harness.apply",
        r#"{"tenant":"team-a","namespaceId":"0190f5a2","dataPlaneNamespace":"oce-ba7816bf8f01cfe","agent":"bot","revision":3,"revisionId":"r-3","harnessKind":"dedicated-openclaw","image":"clawfed.test/harness@sha256:00","requireDigest":true,"requirementLabels":{"sandbox.io/class":"gvisor"},"resources":{"requests":{"cpu":"1"}},"port":8080,"env":{"A":"b"},"workspace":{"size":"1Gi","storageClass":"fast"},"credential":{"model-api-key":"sk"},"dedicated":true,"predecessors":[{"revision":2,"revisionId":"r-2"}],"nodeSelector":{"pool":"a"},"headlessService":true,"pluginSelections":["slack"],"requireStartupStatus":true,"servicePrincipal":{"audience":"aud","expirationSeconds":600}}"#,
    ),
    (
        "harness.stop",
        r#"{"tenant":"team-a","namespaceId":"0190f5a2","dataPlaneNamespace":"oce-ba7816bf8f01cfe","agent":"bot","revision":3,"revisionId":"r-3"}"#,
    ),
    (
        "harness.retire",
        r#"{"tenant":"team-a","namespaceId":"0190f5a2","dataPlaneNamespace":"oce-ba7816bf8f01cfe","agent":"bot","revision":2,"revisionId":"r-2"}"#,
    ),
];

/// A change to a byte string.
#[derive(Debug, Clone)]
pub enum Mutation {
    Flip { at: usize, byte: u8 },
    Truncate { at: usize },
    Delete { at: usize, len: usize },
    Insert { at: usize, bytes: Vec<u8> },
}

/// Tokens that stress JSON decoders when spliced in.
const TOKENS: [&str; 12] = [
    "null",
    "-9223372036854775809",
    "1e999",
    "\"\\ud800\"",
    "[[[[[[[[",
    "{}",
    "\"",
    "\u{0}",
    "\"revision\":\"3\"",
    "\"unknown\":1,",
    "9223372036854775807",
    "true",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Flip { at, byte }),
        1 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        1 => (any::<usize>(), 1usize..8).prop_map(|(at, len)| Mutation::Delete { at, len }),
        2 => (
            any::<usize>(),
            prop_oneof![
                proptest::sample::select(&TOKENS[..]).prop_map(|t| t.as_bytes().to_vec()),
                vec(any::<u8>(), 1..6),
            ]
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
    ]
}

/// `seed` with `mutations` applied (positions modulo the length).
pub fn mutate(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for m in mutations {
        let at = |i: usize, b: &Vec<u8>| if b.is_empty() { 0 } else { i % (b.len() + 1) };
        match m {
            Mutation::Flip { at: i, byte } => {
                if !b.is_empty() {
                    let i = i % b.len();
                    b[i] ^= byte;
                }
            }
            Mutation::Truncate { at: i } => {
                let i = at(*i, &b);
                b.truncate(i);
            }
            Mutation::Delete { at: i, len } => {
                let i = at(*i, &b);
                let end = (i + len).min(b.len());
                b.drain(i..end);
            }
            Mutation::Insert { at: i, bytes } => {
                let i = at(*i, &b);
                b.splice(i..i, bytes.iter().copied());
            }
        }
    }
    b
}

/// Arbitrary bytes, or one of `seeds` mutated a few times.
fn bytes_from(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let mutated = (proptest::sample::select(seeds), vec(mutation(), 0..4))
        .prop_map(|(seed, ms)| mutate(&seed, &ms));
    prop_oneof![1 => vec(any::<u8>(), 0..256), 3 => mutated]
}

fn work_input() -> impl Strategy<Value = (String, Vec<u8>, String)> {
    let kind = prop_oneof![
        8 => proptest::sample::select(WorkKind::ALL.map(WorkKind::as_str).to_vec())
            .prop_map(str::to_owned),
        1 => any::<String>(),
        1 => Just("Harness.Apply".to_owned()),
    ];
    let seeds = WORK_SEEDS
        .iter()
        .map(|(_, s)| s.as_bytes().to_vec())
        .collect();
    let target = prop_oneof![
        "(namespace|harness)(/[a-z0-9+-]{0,6}){0,4}",
        any::<String>(),
    ];
    (kind, bytes_from(seeds), target)
}

fn check_work(kind: &str, spec: &[u8], target: &str) -> Result<(), TestCaseError> {
    if let Ok(decoded) = WorkSpec::decode(kind, spec) {
        prop_assert_eq!(decoded.kind().as_str(), kind);
        let again = WorkSpec::decode(kind, &decoded.encode());
        prop_assert!(
            again.as_ref().is_ok_and(|a| *a == decoded),
            "encode/decode changed the spec: {:?}",
            again
        );
    }
    if let Ok(t) = Target::from_str(target) {
        prop_assert_eq!(Target::from_str(&t.to_string()), Ok(t.clone()));
        prop_assert!(!t.namespace_id().is_empty());
    }
    Ok(())
}

fn run_work_spec(runner: &mut TestRunner) -> Result<(), String> {
    report(runner.run(&work_input(), |(kind, spec, target)| {
        check_work(&kind, &spec, &target)
    }))
}

/// Valid encodings of each link message (mutation seeds).
pub fn link_seeds() -> Vec<Vec<u8>> {
    use pb::{hub_message, report, spoke_message, tunnel_frame};
    let spoke = |body| pb::SpokeMessage { body: Some(body) }.encode_to_vec();
    let hub = |body| pb::HubMessage { body: Some(body) }.encode_to_vec();
    let frame = |body| pb::TunnelFrame { body: Some(body) }.encode_to_vec();
    let (kind, spec) = WORK_SEEDS[2];
    vec![
        spoke(spoke_message::Body::Hello(pb::Hello {
            spoke_version: "0.1.0".into(),
            capabilities: vec!["provisioning-driver".into()],
            applied: [("harness/id/bot/3".to_owned(), 2i64)].into(),
            claimed_cluster_id: "c-1".into(),
            labels: [("region".to_owned(), "eu".to_owned())].into(),
        })),
        spoke(spoke_message::Body::Capacity(pb::CapacityReport {
            nodes: 2,
            allocatable_cpu_millis: 4000,
            allocatable_memory_bytes: 8 << 30,
            free_cpu_millis: 1500,
            free_memory_bytes: 3 << 30,
        })),
        spoke(spoke_message::Body::Ack(pb::Ack {
            sequence: 7,
            target: "namespace/id".into(),
            generation: 1,
        })),
        spoke(spoke_message::Body::Report(pb::Report {
            target: "harness/id/bot/3".into(),
            generation: 2,
            body: Some(report::Body::WorkResult(pb::WorkResult {
                applied: true,
                reason: "applied".into(),
                ..Default::default()
            })),
        })),
        spoke(spoke_message::Body::Report(pb::Report {
            target: "harness/id/bot/3".into(),
            generation: 2,
            body: Some(report::Body::Readiness(pb::ReadinessObservation::default())),
        })),
        spoke(spoke_message::Body::DiagnoseResult(pb::DiagnoseResult {
            request_id: "r".into(),
            checks: vec![pb::DiagnosticCheck {
                name: "model".into(),
                status: "ok".into(),
                detail: "fine".into(),
            }],
            pod: "p".into(),
        })),
        hub(hub_message::Body::Work(pb::Work {
            sequence: 9,
            target: "harness/id/bot/3".into(),
            generation: 2,
            spec: spec.as_bytes().to_vec(),
            kind: kind.into(),
        })),
        hub(hub_message::Body::Welcome(pb::Welcome {
            cluster_id: "c-1".into(),
            cluster_name: "exec-a".into(),
            heartbeat_interval_seconds: 5,
            resend: vec!["namespace/id".into()],
            node_selector: [("pool".to_owned(), "agents".to_owned())].into(),
        })),
        hub(hub_message::Body::TunnelOpen(pb::TunnelOpen {
            tunnel_id: "t".into(),
            target: "harness/id/bot/3".into(),
            revision_id: "r-3".into(),
            port: 8080,
            dial_timeout_ms: 1000,
        })),
        frame(tunnel_frame::Body::Accept(pb::TunnelAccept {
            tunnel_id: "t".into(),
            reason: "dial-failed".into(),
            message: "refused".into(),
        })),
        frame(tunnel_frame::Body::Data(b"GET / HTTP/1.1\r\n\r\n".to_vec())),
        frame(tunnel_frame::Body::Fin(true)),
    ]
}

/// Decodes as `M`; a decoded message must re-encode to itself.
fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(
    bytes: &[u8],
) -> Result<Option<M>, TestCaseError> {
    let Ok(m) = M::decode(bytes) else {
        return Ok(None);
    };
    let again = M::decode(m.encode_to_vec().as_slice());
    prop_assert!(
        again.as_ref().is_ok_and(|a| *a == m),
        "re-encoding changed {m:?}"
    );
    Ok(Some(m))
}

fn run_link_messages(runner: &mut TestRunner) -> Result<(), String> {
    report(runner.run(&bytes_from(link_seeds()), |bytes| {
        round_trip::<pb::SpokeMessage>(&bytes)?;
        round_trip::<pb::TunnelFrame>(&bytes)?;
        if let Some(pb::HubMessage {
            body: Some(pb::hub_message::Body::Work(w)),
        }) = round_trip::<pb::HubMessage>(&bytes)?
        {
            // What the spoke does with it next.
            check_work(&w.kind, &w.spec, &w.target)?;
        }
        Ok(())
    }))
}

/// A startup status input: a body to parse, and what is expected.
#[derive(Debug, Clone)]
pub struct StartupCase {
    pub body: Vec<u8>,
    pub admitted: Vec<String>,
    pub runtime_instance: String,
}

const SELECTIONS: [&str; 4] = ["slack", "github", "web", "Slack"];

fn startup_case() -> impl Strategy<Value = StartupCase> {
    let selection = proptest::sample::select(&SELECTIONS[..]).prop_map(str::to_owned);
    let code = prop_oneof![
        4 => proptest::sample::select(WarningCode::ALL.map(WarningCode::as_str).to_vec())
            .prop_map(str::to_owned),
        1 => Just("PLUGIN_EXPLODED".to_owned()),
    ];
    let warning = (selection.clone(), code)
        .prop_map(|(selection, code)| PublishedWarning { selection, code });
    let status = (
        prop_oneof![6 => Just("rev-1".to_owned()), 1 => Just("rev-2".to_owned())],
        prop_oneof![6 => Just("uid-1".to_owned()), 1 => Just(String::new())],
        vec(selection.clone(), 0..4),
        vec(warning, 0..3),
    )
        .prop_map(
            |(revision_id, runtime_instance, successful, warnings)| StartupStatus {
                revision_id,
                runtime_instance,
                successful,
                warnings,
            },
        );
    let structured = status.prop_map(|s| serde_json::to_vec(&s).unwrap_or_default());
    let seed = br#"{"revisionId":"rev-1","runtimeInstance":"uid-1","successful":["slack"],"warnings":[{"selection":"github","code":"PLUGIN_AUTH_REQUIRED"}]}"#;
    let body = prop_oneof![
        4 => structured,
        2 => bytes_from(vec![seed.to_vec()]),
        1 => Just(b"   \n".to_vec()),
    ];
    (
        body,
        proptest::sample::subsequence(SELECTIONS.map(str::to_owned).to_vec(), 0..=3),
        prop_oneof![6 => Just("uid-1".to_owned()), 1 => Just(String::new())],
    )
        .prop_map(|(body, admitted, runtime_instance)| StartupCase {
            body,
            admitted,
            runtime_instance,
        })
}

fn run_startup(runner: &mut TestRunner) -> Result<(), String> {
    report(runner.run(&startup_case(), |c| {
        let expected = Expected {
            revision_id: "rev-1",
            runtime_instance: &c.runtime_instance,
            admitted: &c.admitted,
        };
        let Ok(accepted) = startup::parse(&c.body, &expected) else {
            return Ok(());
        };
        let status: StartupStatus = serde_json::from_slice(&c.body)
            .map_err(|e| TestCaseError::fail(format!("accepted a body that is no status: {e}")))?;
        prop_assert_eq!(status.revision_id.as_str(), "rev-1");
        prop_assert!(
            !c.runtime_instance.is_empty() && status.runtime_instance == c.runtime_instance,
            "accepted a foreign or unknown runtime instance"
        );
        let mut named: Vec<&str> = accepted.successful.iter().map(String::as_str).collect();
        named.extend(accepted.warnings.iter().map(|w| w.selection.as_str()));
        let unique: BTreeSet<&str> = named.iter().copied().collect();
        prop_assert_eq!(unique.len(), named.len(), "a selection accounted twice");
        let admitted: BTreeSet<&str> = c.admitted.iter().map(String::as_str).collect();
        prop_assert_eq!(
            unique,
            admitted,
            "accounted selections differ from admitted"
        );
        prop_assert!(accepted.successful.is_sorted() && accepted.warnings.is_sorted());
        Ok(())
    }))
}

fn diagnostics_body() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        4 => "[a-z0-9._-]{1,50}",
        1 => any::<String>(),
        1 => Just(String::new()),
    ];
    let status = prop_oneof![
        4 => proptest::sample::select(vec!["ok", "warn", "fail", "unknown"]).prop_map(str::to_owned),
        1 => any::<String>(),
    ];
    let detail = prop_oneof![
        2 => ".{0,40}",
        1 => "[a-z \\n\\t\\r\u{7}]{150,200}",
        1 => any::<String>(),
    ];
    let check = (name, status, detail).prop_map(|(name, status, detail)| PublishedCheck {
        name,
        status,
        detail,
    });
    let structured = vec(check, 0..24)
        .prop_map(|checks| serde_json::to_vec(&DiagnosticsBody { checks }).unwrap_or_default());
    let seed = br#"{"checks":[{"name":"model","status":"ok","detail":"reachable"}]}"#;
    prop_oneof![
        4 => structured,
        2 => bytes_from(vec![seed.to_vec()]),
        1 => Just(vec![b' '; diagnostics::MAX_BODY_BYTES + 1]),
    ]
}

fn run_diagnostics(runner: &mut TestRunner) -> Result<(), String> {
    report(runner.run(&diagnostics_body(), |body| {
        let checks = diagnostics::bound(&body);
        prop_assert!(checks.len() <= diagnostics::MAX_CHECKS);
        for c in &checks {
            prop_assert!(
                !c.name.is_empty()
                    && c.name.chars().count() <= diagnostics::MAX_NAME
                    && c.name.chars().all(|ch| ch.is_ascii_lowercase()
                        || ch.is_ascii_digit()
                        || ".-_".contains(ch)),
                "invalid name passed: {:?}",
                c.name
            );
            prop_assert!(c.detail.chars().count() <= diagnostics::MAX_DETAIL);
            prop_assert!(
                !c.detail.chars().any(char::is_control),
                "detail not a single line: {:?}",
                c.detail
            );
        }
        Ok(())
    }))
}
