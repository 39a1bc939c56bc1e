//! `clawfed`: the user CLI, a REST client of the hub.
//!
//! Exit codes: 0 success, 1 the hub refused the request (its error is
//! printed with the offending field), 2 bad command line, 3 the hub could
//! not be reached.

use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;

use super::args::{
    AgentCommand, Cli, ClusterCommand, Command, ConfigurationCommand, CredentialCommand,
    NamespaceCommand, RevisionCommand, WorkCommand, read_document, read_secret,
};
use super::output::{self, Format, Tabular};
use crate::client::{ClientError, ClientResult, HubClient, TlsOptions};
use crate::model::{
    Agent, AgentRevision, AuditEvent, ChatAnswer, ChatRequest, Cluster, Configuration, CreateAgent,
    CreateConfiguration, CreateNamespace, CredentialMeta, DeployRequest, Diagnosis, FleetSummary,
    List, Namespace, RevisionPhase, UpdateAgent, UpdateConfiguration, WorkItem,
};
use std::time::Duration;

/// Entry point of `clawfed`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn list<T: Tabular + Serialize>(format: Format, items: List<T>) -> ClientResult<String> {
    output::print_list(format, &items.items).map_err(|e| ClientError::Other(e.to_string()))
}

fn one<T: Tabular + Serialize>(format: Format, item: T) -> ClientResult<String> {
    output::print_one(format, &item).map_err(|e| ClientError::Other(e.to_string()))
}

async fn run(cli: Cli) -> ClientResult<String> {
    let tls = TlsOptions {
        ca_file: cli.ca_file.clone(),
        client_cert: cli.client_cert.clone(),
        client_key: cli.client_key.clone(),
    };
    let c = HubClient::with_tls(&cli.server, cli.token.clone(), tls)?;
    let f = cli.output;
    match cli.command {
        Command::Namespaces { command } => match command {
            NamespaceCommand::List => list(f, c.get::<List<Namespace>>("/namespaces").await?),
            NamespaceCommand::Get { name } => {
                one(f, c.get::<Namespace>(&format!("/namespaces/{name}")).await?)
            }
            NamespaceCommand::Create {
                name,
                display_name,
                adopt,
            } => {
                let body = CreateNamespace {
                    name,
                    display_name,
                    adopt_namespace: adopt,
                };
                one(f, c.post::<_, Namespace>("/namespaces", &body).await?)
            }
            NamespaceCommand::Quota { name } => {
                let status = c
                    .get::<crate::quota::TenantQuotaStatus>(&format!("/namespaces/{name}/quota"))
                    .await?;
                list(f, status.items.into())
            }
            NamespaceCommand::Delete { name } => {
                c.delete(&format!("/namespaces/{name}")).await?;
                // With execution clusters the teardown runs there first.
                match c.get::<Namespace>(&format!("/namespaces/{name}")).await {
                    Ok(ns) => Ok(format!(
                        "namespace {name} is {} (torn down in its clusters first)\n",
                        ns.state.as_str()
                    )),
                    Err(_) => Ok(format!("namespace {name} deleted\n")),
                }
            }
        },
        Command::Configurations { command } => match command {
            ConfigurationCommand::List { namespace } => list(
                f,
                c.get::<List<Configuration>>(&format!("/namespaces/{namespace}/configurations"))
                    .await?,
            ),
            ConfigurationCommand::Get { name, namespace } => one(
                f,
                c.get::<Configuration>(&format!("/namespaces/{namespace}/configurations/{name}"))
                    .await?,
            ),
            ConfigurationCommand::Create {
                name,
                namespace,
                file,
            } => {
                let data = read_document(&file)?;
                let body = CreateConfiguration { name, data };
                one(
                    f,
                    c.post::<_, Configuration>(
                        &format!("/namespaces/{namespace}/configurations"),
                        &body,
                    )
                    .await?,
                )
            }
            ConfigurationCommand::Update {
                name,
                namespace,
                file,
            } => {
                let path = format!("/namespaces/{namespace}/configurations/{name}");
                let current: Configuration = c.get(&path).await?;
                let body = UpdateConfiguration {
                    data: read_document(&file)?,
                    version: current.version,
                };
                one(f, c.put::<_, Configuration>(&path, &body).await?)
            }
            ConfigurationCommand::Delete { name, namespace } => {
                c.delete(&format!("/namespaces/{namespace}/configurations/{name}"))
                    .await?;
                Ok(format!("configuration {name} deleted\n"))
            }
        },
        Command::Agents { command } => match command {
            AgentCommand::List { namespace } => list(
                f,
                c.get::<List<Agent>>(&format!("/namespaces/{namespace}/agents"))
                    .await?,
            ),
            AgentCommand::Get {
                name,
                namespace,
                wait,
                timeout,
            } => {
                if wait {
                    wait_for_revision(&c, &namespace, &name, Duration::from_secs(timeout)).await?;
                }
                let agent = c
                    .get::<Agent>(&format!("/namespaces/{namespace}/agents/{name}"))
                    .await?;
                let status = match (f, agent.latest_revision) {
                    (Format::Table, Some(n)) => {
                        let rev = c
                            .get::<AgentRevision>(&format!(
                                "/namespaces/{namespace}/agents/{name}/revisions/{n}"
                            ))
                            .await?;
                        format!(
                            "\nrevision {n}: {} on {}{}\nreadiness: {}\ndrift: {}\n",
                            rev.phase.as_str(),
                            rev.resolved_cluster.as_deref().unwrap_or("(not placed)"),
                            rev.reason.map(|r| format!(" — {r}")).unwrap_or_default(),
                            readiness_line(rev.readiness.as_ref()),
                            output::drift(rev.drift.as_ref()),
                        )
                    }
                    _ => String::new(),
                };
                Ok(format!("{}{status}", one(f, agent)?))
            }
            AgentCommand::Create {
                name,
                namespace,
                spec,
            } => {
                let spec = spec.into_spec(None)?;
                let body = CreateAgent { name, spec };
                one(
                    f,
                    c.post::<_, Agent>(&format!("/namespaces/{namespace}/agents"), &body)
                        .await?,
                )
            }
            AgentCommand::Update {
                name,
                namespace,
                spec,
            } => {
                let path = format!("/namespaces/{namespace}/agents/{name}");
                let current: Agent = c.get(&path).await?;
                let body = UpdateAgent {
                    spec: spec.into_spec(Some(current.spec))?,
                    version: current.version,
                };
                one(f, c.put::<_, Agent>(&path, &body).await?)
            }
            AgentCommand::Delete { name, namespace } => {
                c.delete(&format!("/namespaces/{namespace}/agents/{name}"))
                    .await?;
                Ok(format!("agent {name} deleted\n"))
            }
            AgentCommand::Credentials { command } => match command {
                CredentialCommand::Set {
                    name,
                    namespace,
                    kind,
                    from_file,
                } => {
                    let value = read_secret(from_file.as_ref())?;
                    let path = format!("/namespaces/{namespace}/agents/{name}/credentials/{kind}");
                    let body = serde_json::json!({ "value": value });
                    one(f, c.put::<_, CredentialMeta>(&path, &body).await?)
                }
                CredentialCommand::List { name, namespace } => list(
                    f,
                    c.get::<List<CredentialMeta>>(&format!(
                        "/namespaces/{namespace}/agents/{name}/credentials"
                    ))
                    .await?,
                ),
                CredentialCommand::Delete {
                    name,
                    namespace,
                    kind,
                } => {
                    c.delete(&format!(
                        "/namespaces/{namespace}/agents/{name}/credentials/{kind}"
                    ))
                    .await?;
                    Ok(format!("credential {kind} of agent {name} deleted\n"))
                }
            },
            AgentCommand::Chat {
                name,
                namespace,
                message,
                conversation,
            } => {
                let a = c
                    .post::<_, ChatAnswer>(
                        &format!("/namespaces/{namespace}/agents/{name}/chat"),
                        &ChatRequest {
                            message,
                            conversation,
                        },
                    )
                    .await?;
                if f != Format::Table {
                    return one(f, a);
                }
                Ok(format!(
                    "{}\n(agent {name} revision {}, conversation {}, {} ms)\n",
                    a.answer.trim_end(),
                    a.revision,
                    a.conversation,
                    a.elapsed_ms
                ))
            }
            AgentCommand::Diagnose {
                name,
                namespace,
                revision,
            } => {
                let query = revision
                    .map(|n| format!("?revision={n}"))
                    .unwrap_or_default();
                let d = c
                    .get::<Diagnosis>(&format!(
                        "/namespaces/{namespace}/agents/{name}/diagnose{query}"
                    ))
                    .await?;
                if f != Format::Table {
                    return one(f, d);
                }
                Ok(format!(
                    "agent {name} revision {} on {}\n{}",
                    d.revision,
                    d.cluster.as_deref().unwrap_or("(not placed)"),
                    output::table(
                        <Diagnosis as Tabular>::headers(),
                        &output::diagnosis_rows(&d)
                    )
                ))
            }
        },
        Command::Revisions { command } => match command {
            RevisionCommand::List { agent, namespace } => list(
                f,
                c.get::<List<AgentRevision>>(&format!(
                    "/namespaces/{namespace}/agents/{agent}/revisions"
                ))
                .await?,
            ),
            RevisionCommand::Get {
                number,
                agent,
                namespace,
            } => one(
                f,
                c.get::<AgentRevision>(&format!(
                    "/namespaces/{namespace}/agents/{agent}/revisions/{number}"
                ))
                .await?,
            ),
        },
        Command::Clusters { command } => match command {
            ClusterCommand::List => list(f, c.get::<List<Cluster>>("/clusters").await?),
            ClusterCommand::Get { name: Some(name) } => one(
                f,
                output::ClusterDetail(c.get::<Cluster>(&format!("/clusters/{name}")).await?),
            ),
            ClusterCommand::Get { name: None } => {
                let all = c.get::<List<Cluster>>("/clusters").await?;
                output::print_list(
                    f,
                    &all.items
                        .into_iter()
                        .map(output::ClusterDetail)
                        .collect::<Vec<_>>(),
                )
                .map_err(|e| ClientError::Other(e.to_string()))
            }
            ClusterCommand::Cordon { name } => one(
                f,
                c.post::<_, Cluster>(&format!("/clusters/{name}/cordon"), &())
                    .await?,
            ),
            ClusterCommand::Uncordon { name } => one(
                f,
                c.post::<_, Cluster>(&format!("/clusters/{name}/uncordon"), &())
                    .await?,
            ),
            ClusterCommand::Drain {
                name,
                parallelism,
                wait,
            } => super::drain::drain(&c, f, &name, parallelism, wait).await,
        },
        Command::Deploy {
            agent,
            namespace,
            from_revision,
            idempotency_key,
            retries,
        } => {
            let key = idempotency_key.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let req = DeployRequest { from_revision };
            let rev = c
                .deploy_with_retries(&namespace, &agent, &req, &key, retries)
                .await?;
            one(f, rev)
        }
        Command::Stop { agent, namespace } => one(
            f,
            c.post::<_, Agent>(
                &format!("/namespaces/{namespace}/agents/{agent}/stop"),
                &serde_json::json!({}),
            )
            .await?,
        ),
        Command::Fleet { watch: true } => watch_fleet(&c, f).await,
        Command::Events { follow, cursor } => events(&c, f, follow, cursor).await,
        Command::Fleet { watch: false } => {
            let summary = c.get::<FleetSummary>("/fleet").await?;
            if f != Format::Table {
                return one(f, summary);
            }
            let clusters = c.get::<List<Cluster>>("/clusters").await?;
            Ok(format!("{}\n{}", one(f, summary)?, list(f, clusters)?))
        }
        Command::Audit {
            namespace,
            follow,
            cursor,
            ..
        } if follow || cursor.is_some() => {
            stream_audit(&c, f, namespace.as_deref(), cursor, follow).await
        }
        Command::Audit {
            namespace, limit, ..
        } => {
            let mut query = Vec::new();
            if let Some(ns) = namespace {
                query.push(format!("namespace={ns}"));
            }
            if let Some(l) = limit {
                query.push(format!("limit={l}"));
            }
            list(
                f,
                c.get::<List<AuditEvent>>(&format!("/audit?{}", query.join("&")))
                    .await?,
            )
        }
        Command::Work { command } => match command {
            WorkCommand::List {
                namespace,
                state,
                limit,
            } => {
                let mut query = Vec::new();
                if let Some(ns) = namespace {
                    query.push(format!("namespace={ns}"));
                }
                if let Some(s) = state {
                    query.push(format!("state={s}"));
                }
                if let Some(l) = limit {
                    query.push(format!("limit={l}"));
                }
                list(
                    f,
                    c.get::<List<WorkItem>>(&format!("/work?{}", query.join("&")))
                        .await?,
                )
            }
            WorkCommand::Get { id } => one(f, c.get::<WorkItem>(&format!("/work/{id}")).await?),
        },
    }
}

/// The spoke's readiness verdict as one line: the verdict from the spoke,
/// not inferred from the phase.
fn readiness_line(r: Option<&crate::link::report::ReadinessReport>) -> String {
    let Some(r) = r else {
        return "no report from the spoke yet".into();
    };
    if let Some(error) = &r.error {
        return format!("unknown: observation error: {error}");
    }
    let verdict = if r.ready { "ready" } else { "not ready" };
    let pod = r
        .pod
        .as_deref()
        .map(|p| format!(", pod {p}"))
        .unwrap_or_default();
    let reason = if r.reason.is_empty() {
        String::new()
    } else {
        format!(" — {}", r.reason)
    };
    let startup = match (&r.startup_reason, output::startup_warnings(Some(r))) {
        (Some(why), _) => format!("; {why}"),
        (None, Some(w)) => format!("; startup warnings: {w}"),
        (None, None) => String::new(),
    };
    format!(
        "{verdict} ({} live, {} ready candidates{pod}){reason}{startup}",
        r.live_candidates, r.ready_candidates
    )
}

/// Prints the latest revision's phases until it settles; an error when it
/// failed or the wait timed out.
async fn wait_for_revision(
    c: &HubClient,
    namespace: &str,
    agent: &str,
    timeout: Duration,
) -> ClientResult<()> {
    use crate::client::events::Frame;
    let started = std::time::Instant::now();
    let mut last: Option<(i64, RevisionPhase)> = None;
    // Watch first, then look: a change between the look and the wait is
    // an event on the stream, never missed.
    let mut events = c.watch(None, true).await?;
    loop {
        if revision_settled(c, namespace, agent, started, &mut last).await? {
            return Ok(());
        }
        // Until an event about this Agent's revisions (or a re-list).
        loop {
            let Some(remaining) = timeout.checked_sub(started.elapsed()) else {
                let (number, phase) = last.unwrap_or((0, RevisionPhase::Pending));
                return Err(ClientError::Other(format!(
                    "revision {number} still {} after {}s",
                    phase.as_str(),
                    timeout.as_secs()
                )));
            };
            match tokio::time::timeout(remaining, events.next()).await {
                Err(_) => continue, // the deadline; reported above
                Ok(Ok(Some(Frame::Event(e)))) => {
                    let ours = e.namespace.as_deref() == Some(namespace)
                        && matches!(&e.body, crate::model::event::EventBody::RevisionPhase(p) if p.agent == agent);
                    if ours {
                        break;
                    }
                }
                // Cut off, ended or broken: watch again and look again.
                Ok(Ok(Some(Frame::Relist(_)) | None) | Err(_)) => {
                    events = c.watch(None, true).await?;
                    break;
                }
            }
        }
    }
}

/// Looks at the Agent's latest revision once, printing a phase it has not
/// printed yet; true when the revision settled (active, stopped, retired),
/// an error when it failed.
async fn revision_settled(
    c: &HubClient,
    namespace: &str,
    agent: &str,
    started: std::time::Instant,
    last: &mut Option<(i64, RevisionPhase)>,
) -> ClientResult<bool> {
    let a: Agent = c
        .get(&format!("/namespaces/{namespace}/agents/{agent}"))
        .await?;
    let Some(number) = a.latest_revision else {
        return Err(ClientError::Usage(format!(
            "agent {agent} has no revision to wait for; deploy it first"
        )));
    };
    let rev: AgentRevision = c
        .get(&format!(
            "/namespaces/{namespace}/agents/{agent}/revisions/{number}"
        ))
        .await?;
    if *last != Some((number, rev.phase)) {
        *last = Some((number, rev.phase));
        eprintln!(
            "revision {number}: {} (+{:.1}s){}",
            rev.phase.as_str(),
            started.elapsed().as_secs_f64(),
            rev.reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        );
    }
    match rev.phase {
        RevisionPhase::Active | RevisionPhase::Stopped | RevisionPhase::Retired => Ok(true),
        RevisionPhase::Failed => Err(ClientError::Other(format!(
            "revision {number} failed: {}",
            rev.reason.unwrap_or_default()
        ))),
        _ => Ok(false),
    }
}

/// How many times in a row a live view opens its stream again before it
/// gives up.
const REOPEN_ATTEMPTS: u32 = 5;

/// `clawfed events`: prints events as they come (table lines, or one JSON
/// object per line with `-o json`).
async fn events(
    c: &HubClient,
    f: Format,
    follow: bool,
    cursor: Option<i64>,
) -> ClientResult<String> {
    use super::watch::{header, line};
    use crate::client::events::Frame;
    use std::io::Write;
    // Without --follow the whole kept log is the default; following, the
    // news.
    let cursor = cursor.or(if follow { None } else { Some(0) });
    let mut reader = c.watch(cursor, follow).await?;
    let mut out = std::io::stdout();
    if f == Format::Table {
        let _ = writeln!(out, "{}", header());
    }
    loop {
        match reader
            .next()
            .await
            .map_err(|e| ClientError::Other(e.to_string()))?
        {
            Some(Frame::Event(e)) => {
                let text = match f {
                    Format::Table => line(&e),
                    _ => {
                        serde_json::to_string(&e).map_err(|e| ClientError::Other(e.to_string()))?
                    }
                };
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
            Some(Frame::Relist(r)) => {
                return Err(ClientError::Other(format!(
                    "the hub ended the stream: {}",
                    r.message
                )));
            }
            None => return Ok(String::new()),
        }
    }
}

/// `clawfed audit --follow | --cursor N`: the audit stream, one line per
/// event; a stream that breaks (the hub restarted, the network dropped) is
/// reopened after the last event's cursor, so nothing is missed or repeated.
async fn stream_audit(
    c: &HubClient,
    f: Format,
    namespace: Option<&str>,
    mut cursor: Option<i64>,
    follow: bool,
) -> ClientResult<String> {
    use std::io::Write;
    let mut out = std::io::stdout();
    if f == Format::Table {
        let _ = writeln!(out, "CURSOR  {}", AuditEvent::headers().join("  "));
    }
    // Breaks in a row with no event between: following, the stream is
    // reopened for as long as it takes (Ctrl-C ends), each pause twice the
    // last up to 32 s; otherwise it gives up after REOPEN_ATTEMPTS.
    let mut breaks: u32 = 0;
    loop {
        let error = match c.stream_audit(namespace, cursor, follow).await {
            Ok(mut reader) => {
                // Opened "from now on": a reopen resumes from where this began.
                cursor = cursor.or(reader.starts_after());
                loop {
                    match reader.next_audit().await {
                        Ok(Some(e)) => {
                            breaks = 0;
                            cursor = e.cursor.or(cursor);
                            let text = match f {
                                Format::Table => format!(
                                    "{}  {}",
                                    e.cursor.unwrap_or_default(),
                                    e.row().join("  ")
                                ),
                                _ => serde_json::to_string(&e)
                                    .map_err(|e| ClientError::Other(e.to_string()))?,
                            };
                            let _ = writeln!(out, "{text}");
                            let _ = out.flush();
                        }
                        Ok(None) if !follow => return Ok(String::new()),
                        // The hub closed a following stream: it shuts down.
                        Ok(None) => break ClientError::Other("the hub closed the stream".into()),
                        Err(e) if e.is_retryable() => break ClientError::Other(e.to_string()),
                        Err(e) => return Err(ClientError::Other(e.to_string())),
                    }
                }
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        breaks += 1;
        if !follow && breaks > REOPEN_ATTEMPTS {
            return Err(error);
        }
        tokio::time::sleep(Duration::from_secs(1 << breaks.min(5))).await;
    }
}

/// Opens a stream with `open`, retrying what may succeed later (the hub
/// restarting, the network) up to `REOPEN_ATTEMPTS` times, each pause
/// twice the last.
async fn open_retrying<F, Fut>(mut open: F) -> ClientResult<crate::client::events::EventReader>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ClientResult<crate::client::events::EventReader>>,
{
    let mut failures = 0;
    loop {
        match open().await {
            Ok(reader) => return Ok(reader),
            Err(e) if failures < REOPEN_ATTEMPTS && e.is_retryable() => {
                failures += 1;
                tokio::time::sleep(Duration::from_secs(1 << failures)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `clawfed fleet --watch`: the fleet table, redrawn after each burst of
/// events (events arriving together make one redraw).
async fn watch_fleet(c: &HubClient, f: Format) -> ClientResult<String> {
    use crate::client::events::Frame;
    use std::io::Write;
    loop {
        // Watch first, then read the table: nothing between is missed.
        let mut reader = open_retrying(|| c.watch(None, true)).await?;
        loop {
            let summary = c.get::<FleetSummary>("/fleet").await?;
            let clusters = c.get::<List<Cluster>>("/clusters").await?;
            let table = if f == Format::Table {
                format!("{}\n{}", one(f, summary)?, list(f, clusters)?)
            } else {
                one(f, summary)?
            };
            let mut out = std::io::stdout();
            // Clear the screen and home the cursor, then the table.
            let _ = write!(
                out,
                "\x1b[2J\x1b[H{table}\nupdated {} (watching; Ctrl-C ends)\n",
                chrono::Utc::now().format("%H:%M:%S")
            );
            let _ = out.flush();
            match reader.next().await {
                Ok(Some(Frame::Event(_))) => {
                    // Coalesce a burst: what else arrives within 200 ms.
                    while let Ok(Ok(Some(Frame::Event(_)))) =
                        tokio::time::timeout(Duration::from_millis(200), reader.next()).await
                    {
                    }
                }
                // Cut off, ended or broken: watch again, read again.
                _ => break,
            }
        }
    }
}
