//! The calls that reach an Agent's running revision: diagnose (its Harness
//! and Gateway Pods, through [`super::diagnose`]) and chat (one turn on its
//! runtime, through [`super::chat`]).

use super::access::Mutation;
use super::{Result, Service, ServiceError, chat, diagnose};
use crate::auth::{Action, Principal};
use crate::model::Diagnosis;
use crate::store::StoreError;

impl Service {
    /// Bounded diagnostics of the Agent's active (or else latest) revision:
    /// its Harness Pod through the revision's spoke, its Gateway Pod in the
    /// control cluster. A read, authorized for the exact Agent; it never
    /// changes the deployment's status.
    pub async fn diagnose(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        revision: Option<i64>,
    ) -> Result<Diagnosis> {
        self.check_read(p, Action::Read, Some(ns))?;
        let a = self.store.get_agent(ns, agent).await?;
        // The chosen revision (authorized with its Agent: the same tenant),
        // else the active one, else the latest.
        let number = match revision {
            Some(n) if n < 1 => {
                return Err(ServiceError::InvalidArgument {
                    field: "revision".into(),
                    reason: format!("{n} is not a revision number (1 or more)"),
                });
            }
            Some(n) => n,
            None => match a.active_revision.or(a.latest_revision) {
                Some(n) => n,
                None => {
                    return Err(ServiceError::FailedPrecondition(format!(
                        "agent {agent} has no revision to diagnose (deploy it first)"
                    )));
                }
            },
        };
        let rev = match self.store.get_revision(ns, agent, number).await {
            Err(StoreError::NotFound { .. }) if revision.is_some() => {
                return Err(ServiceError::InvalidArgument {
                    field: "revision".into(),
                    reason: format!("agent {agent:?} has no revision {number}"),
                });
            }
            other => other?,
        };
        let source = self.diagnostics.get().cloned();
        let cluster_id = match &rev.resolved_cluster {
            Some(name) => self
                .store
                .list_clusters()
                .await?
                .into_iter()
                .find(|c| &c.name == name)
                .map(|c| c.id),
            None => None,
        };
        let ns_id = self.store.get_namespace(ns).await?.id;
        let harness = match (&source, &cluster_id) {
            (Some(s), Some(cid)) => {
                let target = clawfed_proto::work::target::harness(&ns_id, agent, number);
                s.harness(cid, &target, &rev.id).await
            }
            (None, _) => diagnose::unknown("harness", "this hub runs no spoke link"),
            (_, None) => diagnose::unknown("harness", "the revision is not placed on a cluster"),
        };
        let gateway = match &source {
            Some(s) => s.gateway(&ns_id, agent, number).await,
            None => diagnose::unknown("gateway", "this hub runs no control-cluster Gateways"),
        };
        Ok(Diagnosis {
            namespace: ns.to_owned(),
            agent: agent.to_owned(),
            revision: number,
            revision_id: rev.id,
            cluster: rev.resolved_cluster,
            harness,
            gateway,
        })
    }

    /// One chat message to the active revision's OpenClaw runtime, sent by
    /// the hub through the revision's spoke ([`chat`]): the model's answer.
    /// Needs deploy rights (a turn costs a model call) and is audited as
    /// `agent.chat` without the message.
    pub async fn chat(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        req: crate::model::ChatRequest,
    ) -> Result<crate::model::ChatAnswer> {
        let m = Mutation::new(p, "agent.chat", Some(ns), agent);
        self.authorize(Action::Deploy, &m).await?;
        let invalid = |field: &str, reason: &str| ServiceError::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        };
        if req.message.trim().is_empty() || req.message.len() > MAX_CHAT_MESSAGE {
            return Err(invalid(
                "message",
                &format!("must be 1 to {MAX_CHAT_MESSAGE} bytes of text"),
            ));
        }
        let conversation = match req.conversation {
            Some(c) if !is_conversation_id(&c) => {
                return Err(invalid(
                    "conversation",
                    "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -",
                ));
            }
            Some(c) => c,
            None => default_conversation(&p.token_name),
        };
        let a = self.store.get_agent(ns, agent).await?;
        let Some(number) = a.active_revision else {
            return Err(ServiceError::FailedPrecondition(format!(
                "agent {agent} has no active revision (deploy it and wait until it is active)"
            )));
        };
        let rev = self.store.get_revision(ns, agent, number).await?;
        let source = self.chat.get().cloned().ok_or_else(|| {
            ServiceError::Unavailable("this hub runs no spoke link to reach runtimes".into())
        })?;
        let started = std::time::Instant::now();
        let outcome = source
            .turn(&*self.store, &rev, &conversation, &req.message)
            .await;
        let elapsed_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let (result, detail) = match &outcome {
            Ok(_) => ("ok", format!("revision {number}, {elapsed_ms} ms")),
            Err(e) => ("failed", format!("revision {number}: {e}")),
        };
        self.append_audit(&m.event(result, Some(detail))).await;
        let answer = outcome.map_err(|e| match e {
            chat::ChatError::Unreachable(_) | chat::ChatError::Key(_) => {
                ServiceError::Unavailable(e.to_string())
            }
            chat::ChatError::NotAnswered(_) => ServiceError::FailedPrecondition(e.to_string()),
        })?;
        Ok(crate::model::ChatAnswer {
            namespace: ns.to_owned(),
            agent: agent.to_owned(),
            revision: number,
            conversation,
            answer,
            elapsed_ms,
        })
    }
}

/// The largest chat message, in bytes.
pub const MAX_CHAT_MESSAGE: usize = 16 * 1024;

/// A conversation id the runtime gets as its OpenAI `user`.
fn is_conversation_id(c: &str) -> bool {
    (1..=128).contains(&c.len())
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".:_-".contains(&b))
}

/// The caller's own conversation: `clawfed-chat-<token name>`, other
/// characters as `-`.
fn default_conversation(token_name: &str) -> String {
    let name: String = token_name
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".:_-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("clawfed-chat-{name}")
}
