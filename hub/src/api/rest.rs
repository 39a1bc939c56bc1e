//! REST under `/api/v1`. Each handler is registered together with its
//! OpenAPI operation (utoipa-axum `routes!`), so `/openapi.json` is
//! generated from the handlers themselves and cannot drift from them.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ErrorBody, ErrorCode};
use crate::auth::Principal;
use crate::model::{
    Agent, AgentRevision, AuditEvent, BootstrapTokenCreated, ChatAnswer, ChatRequest, Cluster,
    Configuration, CreateAgent, CreateBootstrapToken, CreateConfiguration, CreateNamespace,
    CredentialMeta, DeployRequest, Diagnosis, FleetSummary, List, Namespace, Object, SetCredential,
    UpdateAgent, UpdateConfiguration, WorkItem,
};
use crate::secrets::SecretValue;
use crate::service::ServiceError;

type ApiResult<T> = Result<T, ApiError>;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "clawfed hub API",
        description = "Desired state of tenants, Agents and AgentRevisions; fleet status. \
                       Same semantics as the gRPC service clawfed.admin.v1.AdminService. \
                       Every query parameter an operation accepts is listed; any other is \
                       refused with 400 (a misspelt filter never lists everything)."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(
        ErrorBody,
        crate::model::event::ClusterEvent,
        crate::model::event::RevisionPhaseEvent,
        crate::model::event::ReadinessEvent,
        crate::model::event::WorkFailedEvent,
        crate::model::event::RelistEvent
    ))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The error answers every operation can give, so the document lists them
/// without each handler repeating them: 401 and 403 everywhere (every
/// operation needs a token with a permission), 400 where there is a
/// parameter or a body to refuse, 404 where a path names something, 413
/// where there is a body. Answers a handler documents itself (409, or a
/// 400 with its own description) are kept.
struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::{Operation, ParameterIn};
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

        let answer = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        let add = |op: &mut Operation| {
            let params = op.parameters.as_deref().unwrap_or_default();
            let in_path = params
                .iter()
                .any(|p| matches!(p, RefOr::T(p) if p.parameter_in == ParameterIn::Path));
            let has_body = op.request_body.is_some();
            let mut wanted = vec![
                ("401", "No token, or an unknown, expired or revoked one"),
                ("403", "The token lacks the permission"),
            ];
            if !params.is_empty() || has_body {
                wanted.push((
                    "400",
                    "A parameter or the body is invalid (`error.field` names it)",
                ));
            }
            if in_path {
                wanted.push(("404", "What the path names does not exist"));
            }
            if has_body {
                wanted.push(("413", "The body is larger than `api.maxBodyBytes`"));
            }
            for (status, description) in wanted {
                op.responses
                    .responses
                    .entry(status.to_owned())
                    .or_insert_with(|| answer(description));
            }
        };
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                add(op);
            }
        }
    }
}

/// The REST router (without state) and its OpenAPI document.
pub fn router() -> (axum::Router<AppState>, utoipa::openapi::OpenApi) {
    let router = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(list_namespaces, create_namespace))
        .routes(routes!(get_namespace, delete_namespace))
        .routes(routes!(list_configurations, create_configuration))
        .routes(routes!(
            get_configuration,
            update_configuration,
            delete_configuration
        ))
        .routes(routes!(list_agents, create_agent))
        .routes(routes!(get_agent, update_agent, delete_agent))
        .routes(routes!(deploy))
        .routes(routes!(stop))
        .routes(routes!(list_revisions))
        .routes(routes!(get_revision))
        .routes(routes!(list_credentials))
        .routes(routes!(set_credential, delete_credential))
        .routes(routes!(list_revision_credentials))
        .routes(routes!(diagnose))
        .routes(routes!(chat))
        .routes(routes!(list_clusters))
        .routes(routes!(get_cluster))
        .routes(routes!(create_bootstrap_token))
        .routes(routes!(revoke_cluster))
        .routes(routes!(approve_cluster))
        .routes(routes!(fleet))
        .routes(routes!(watch))
        .routes(routes!(list_audit))
        .routes(routes!(list_work))
        .routes(routes!(get_work));
    // After the routes: a modifier in `#[openapi]` runs before any path
    // is in the document.
    let (router, mut doc) = router.split_for_parts();
    ErrorResponses.modify(&mut doc);
    (router, doc)
}

/// The document as served: `doc` with the checks the types do not carry
/// stated in it (the patterns of [`crate::service::patterns`], the rules
/// of [`crate::service::validate`]), and what this installation checks:
/// with no default agent image (`images.agent`), `spec.image` is required
/// and may not be empty.
pub fn served_document(
    doc: &utoipa::openapi::OpenApi,
    policy: &crate::service::Policy,
) -> serde_json::Value {
    use crate::service::patterns;
    use serde_json::json;
    let mut doc = serde_json::to_value(doc).unwrap_or_default();
    let schemas = &mut doc["components"]["schemas"];
    let dns_label = json!({ "minLength": 1, "maxLength": 63, "pattern": patterns::DNS_LABEL });
    let labels = json!({
        "propertyNames": { "pattern": patterns::LABEL_KEY },
        "additionalProperties": { "type": "string", "pattern": patterns::LABEL_VALUE },
    });
    let image = |pattern: &str| json!({ "maxLength": patterns::IMAGE_MAX, "pattern": pattern });
    let state = |schema: &mut serde_json::Value, rules: serde_json::Value| {
        if let (Some(schema), Some(rules)) = (schema.as_object_mut(), rules.as_object()) {
            schema.extend(rules.clone());
        }
    };
    let spec = &mut schemas["AgentSpec"]["properties"];
    state(&mut spec["image"], image(patterns::IMAGE_OR_EMPTY));
    state(&mut spec["gatewayImage"], image(patterns::IMAGE));
    state(&mut spec["configuration"], dns_label.clone());
    state(&mut spec["requirementLabels"], labels.clone());
    state(
        &mut spec["plugins"],
        json!({ "items": { "type": "string", "minLength": 1, "maxLength": 63,
                           "pattern": patterns::DNS_LABEL },
                "uniqueItems": true }),
    );
    let placement = &mut schemas["Placement"]["properties"];
    state(&mut placement["cluster"], dns_label);
    state(&mut placement["clusterSelector"], labels);
    for field in ["cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit"] {
        state(
            &mut schemas["Resources"]["properties"][field],
            json!({ "pattern": patterns::QUANTITY }),
        );
    }
    if policy.default_agent_image.is_none() {
        let spec = &mut schemas["AgentSpec"];
        state(
            &mut spec["properties"]["image"],
            json!({
                "minLength": 1,
                "description": "Harness image reference; `name@sha256:<64 hex>` pins a digest. \
                                Required: this installation has no default agent image \
                                (`images.agent`)."
            }),
        );
        if let Some(required) = spec["required"].as_array_mut()
            && !required.contains(&json!("image"))
        {
            required.push(json!("image"));
        }
    }
    doc
}

// ---- extractors ------------------------------------------------------------

/// The authenticated caller, from `Authorization: Bearer <token>`, or else
/// from the connection's verified client certificate (TLS with
/// `api.tls.clientCaFile`).
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Self> {
        let bearer = match parts.headers.get(header::AUTHORIZATION) {
            None => None,
            Some(value) => {
                let value = value.to_str().unwrap_or_default();
                match value.strip_prefix("Bearer ") {
                    Some(token) if !token.trim().is_empty() => Some(token.trim()),
                    _ => {
                        return Err(ServiceError::Unauthenticated(
                            "Authorization header must be 'Bearer <token>'".into(),
                        )
                        .into());
                    }
                }
            }
        };
        let client_cert = parts
            .extensions
            .get::<axum::extract::ConnectInfo<super::tls::TlsPeer>>()
            .and_then(|info| info.0.client_cert.as_ref());
        Ok(Caller(
            state
                .service
                .authenticate_request(bearer, client_cert)
                .await?,
        ))
    }
}

/// A JSON body: malformed JSON, unknown fields and wrong types are 400s
/// naming the field; an oversized body is a 413.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned + Default> Body<Option<T>> {
    fn or_default(self) -> T {
        self.0.unwrap_or_default()
    }
}

/// Why a body was refused.
pub enum BodyRejection {
    /// Larger than the configured limit (bytes).
    TooLarge(usize),
    /// Not valid for the expected type.
    Invalid(ApiError),
}

impl IntoResponse for BodyRejection {
    fn into_response(self) -> Response {
        match self {
            Self::TooLarge(limit) => ApiError::response(
                ErrorCode::PayloadTooLarge,
                format!("request body is larger than the limit of {limit} bytes"),
                None,
            ),
            Self::Invalid(e) => e.into_response(),
        }
    }
}

async fn read_body(req: Request, state: &AppState) -> Result<Bytes, BodyRejection> {
    let limit = state.max_body_bytes;
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| BodyRejection::TooLarge(limit))
}

/// Every body is a JSON object: [`Object`] refuses an array that serde
/// would otherwise fill into the struct's fields by position.
fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyRejection> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de)
        .map(|Object(v)| v)
        .map_err(|err| {
            let path = err.path().to_string();
            let field = if path == "." { "body".to_owned() } else { path };
            let inner = err.into_inner();
            let reason = match inner.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                    format!("malformed JSON: {inner}")
                }
                _ => inner.to_string(),
            };
            BodyRejection::Invalid(ApiError(ServiceError::InvalidArgument { field, reason }))
        })
}

impl<T: DeserializeOwned> FromRequest<AppState> for Body<T> {
    type Rejection = BodyRejection;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, BodyRejection> {
        let bytes = read_body(req, state).await?;
        Ok(Body(parse_json(&bytes)?))
    }
}

/// The `{kind}` of a credential path: the document lists the kinds the
/// server accepts (`clawfed_proto::work::credential::CredentialKind`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // A schema only: the path is parsed as a string.
enum CredentialKindParam {
    #[schema(rename = "model-api-key")]
    ModelApiKey,
    #[schema(rename = "service-account")]
    ServiceAccount,
}

/// An optional JSON body: empty, or `null` (the document's schema for it
/// is nullable), means the type's default.
pub struct OptionalBody<T>(pub Body<Option<T>>);

impl<T: DeserializeOwned> FromRequest<AppState> for OptionalBody<T> {
    type Rejection = BodyRejection;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, BodyRejection> {
        let bytes = read_body(req, state).await?;
        if matches!(bytes.trim_ascii(), b"" | b"null") {
            return Ok(OptionalBody(Body(None)));
        }
        Ok(OptionalBody(Body(Some(parse_json(&bytes)?))))
    }
}

/// A JSON body holding a secret: like [`Body`], but a refusal never quotes
/// the input (serde's messages can echo a string it did not expect).
pub struct SecretBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for SecretBody<T> {
    type Rejection = BodyRejection;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, BodyRejection> {
        let bytes = read_body(req, state).await?;
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(&mut de)
            .map(|Object(v)| SecretBody(v))
            .map_err(|err| {
                let path = err.path().to_string();
                let field = if path == "." { "body".to_owned() } else { path };
                let reason = match err.inner().classify() {
                    serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                        "malformed JSON".to_owned()
                    }
                    _ => {
                        r#"must be a JSON object {"value": "<secret>"} and nothing else"#.to_owned()
                    }
                };
                BodyRejection::Invalid(ApiError(ServiceError::InvalidArgument { field, reason }))
            })
    }
}

/// Query parameters, with bad ones reported as 400s.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> ApiResult<Self> {
        let query_error = |e: QueryRejection| {
            ApiError(ServiceError::InvalidArgument {
                field: "query".into(),
                reason: e.body_text(),
            })
        };
        let Query(raw) =
            Query::<Vec<(String, String)>>::try_from_uri(&parts.uri).map_err(query_error)?;
        reject_nul(&raw)?;
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| Params(v))
            .map_err(query_error)
    }
}

/// Path parameters, with bad ones reported as 400s in the JSON error body
/// (axum's own rejection is plain text).
pub struct PathParams<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Self> {
        let Path(raw) = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(path_error)?;
        reject_nul(&raw)?;
        let Path(value) = Path::<T>::from_request_parts(parts, state)
            .await
            .map_err(path_error)?;
        Ok(PathParams(value))
    }
}

fn path_error(e: PathRejection) -> ApiError {
    if e.status().is_client_error() {
        ApiError(ServiceError::InvalidArgument {
            field: "path".into(),
            reason: e.body_text(),
        })
    } else {
        ApiError(ServiceError::Internal(e.body_text()))
    }
}

/// PostgreSQL text cannot hold NUL, so a NUL in a name or id would fail in
/// the database as a 500; it is a malformed parameter, named here.
fn reject_nul(params: &[(String, String)]) -> ApiResult<()> {
    match params.iter().find(|(_, value)| value.contains('\0')) {
        Some((name, _)) => Err(ApiError(ServiceError::InvalidArgument {
            field: name.clone(),
            reason: "must not contain NUL characters".into(),
        })),
        None => Ok(()),
    }
}

fn created<T: serde::Serialize>(value: T) -> Response {
    (StatusCode::CREATED, Json(value)).into_response()
}

fn with_etag<T: serde::Serialize>(version: i64, value: T) -> Response {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{version}\"")) {
        headers.insert(header::ETAG, v);
    }
    (headers, Json(value)).into_response()
}

fn parse_number(field: &str, value: &str) -> ApiResult<i64> {
    value.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        ApiError(ServiceError::InvalidArgument {
            field: field.into(),
            reason: format!("{value:?} is not a positive integer"),
        })
    })
}

// ---- namespaces ------------------------------------------------------------

/// List the namespaces the caller may see.
#[utoipa::path(get, path = "/api/v1/namespaces", tag = "namespaces",
    responses((status = 200, body = List<Namespace>), (status = 401, body = ErrorBody)))]
async fn list_namespaces(
    State(s): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<Json<List<Namespace>>> {
    Ok(Json(s.service.list_namespaces(&p).await?.into()))
}

/// Create a namespace (installation admins).
#[utoipa::path(post, path = "/api/v1/namespaces", tag = "namespaces", request_body = CreateNamespace,
    responses((status = 201, body = Namespace), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn create_namespace(
    State(s): State<AppState>,
    Caller(p): Caller,
    Body(req): Body<CreateNamespace>,
) -> ApiResult<Response> {
    Ok(created(s.service.create_namespace(&p, req).await?))
}

/// Get a namespace.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)),
    responses((status = 200, body = Namespace), (status = 404, body = ErrorBody)))]
async fn get_namespace(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Response> {
    let n = s.service.get_namespace(&p, &ns).await?;
    Ok(with_etag(n.version, n))
}

/// Delete an empty namespace: 204 when it is gone, 202 when its teardown in
/// the execution clusters was queued (it shows state `deleting`).
#[utoipa::path(delete, path = "/api/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)),
    responses((status = 204), (status = 202), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn delete_namespace(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<StatusCode> {
    Ok(if s.service.delete_namespace(&p, &ns).await? {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::ACCEPTED
    })
}

// ---- configurations --------------------------------------------------------

/// List configurations.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/configurations", tag = "configurations",
    params(("ns" = String, Path)), responses((status = 200, body = List<Configuration>)))]
async fn list_configurations(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Json<List<Configuration>>> {
    Ok(Json(s.service.list_configurations(&p, &ns).await?.into()))
}

/// Create a configuration.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/configurations", tag = "configurations",
    params(("ns" = String, Path)), request_body = CreateConfiguration,
    responses((status = 201, body = Configuration), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
async fn create_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
    Body(req): Body<CreateConfiguration>,
) -> ApiResult<Response> {
    Ok(created(s.service.create_configuration(&p, &ns, req).await?))
}

/// Get a configuration.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/configurations/{name}", tag = "configurations",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = Configuration), (status = 404, body = ErrorBody)))]
async fn get_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    let c = s.service.get_configuration(&p, &ns, &name).await?;
    Ok(with_etag(c.version, c))
}

/// Replace a configuration (`version` must be the one last read).
#[utoipa::path(put, path = "/api/v1/namespaces/{ns}/configurations/{name}", tag = "configurations",
    params(("ns" = String, Path), ("name" = String, Path)), request_body = UpdateConfiguration,
    responses((status = 200, body = Configuration), (status = 409, body = ErrorBody)))]
async fn update_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Body(req): Body<UpdateConfiguration>,
) -> ApiResult<Response> {
    let c = s.service.update_configuration(&p, &ns, &name, req).await?;
    Ok(with_etag(c.version, c))
}

/// Delete a configuration.
#[utoipa::path(delete, path = "/api/v1/namespaces/{ns}/configurations/{name}", tag = "configurations",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
async fn delete_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    s.service.delete_configuration(&p, &ns, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- agents ----------------------------------------------------------------

/// List Agents.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents", tag = "agents",
    params(("ns" = String, Path)), responses((status = 200, body = List<Agent>)))]
async fn list_agents(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Json<List<Agent>>> {
    Ok(Json(s.service.list_agents(&p, &ns).await?.into()))
}

/// Create an Agent draft.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents", tag = "agents",
    params(("ns" = String, Path)), request_body = CreateAgent,
    responses((status = 201, body = Agent), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
async fn create_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
    Body(req): Body<CreateAgent>,
) -> ApiResult<Response> {
    Ok(created(s.service.create_agent(&p, &ns, req).await?))
}

/// Get an Agent.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = Agent), (status = 404, body = ErrorBody)))]
async fn get_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    let a = s.service.get_agent(&p, &ns, &name).await?;
    Ok(with_etag(a.version, a))
}

/// Replace an Agent's draft spec (`version` must be the one last read).
#[utoipa::path(put, path = "/api/v1/namespaces/{ns}/agents/{name}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)), request_body = UpdateAgent,
    responses((status = 200, body = Agent), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
async fn update_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Body(req): Body<UpdateAgent>,
) -> ApiResult<Response> {
    let a = s.service.update_agent(&p, &ns, &name, req).await?;
    Ok(with_etag(a.version, a))
}

/// Delete a stopped Agent and its revisions.
#[utoipa::path(delete, path = "/api/v1/namespaces/{ns}/agents/{name}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn delete_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    s.service.delete_agent(&p, &ns, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deploy: freeze the draft (or, with `fromRevision`, an earlier revision)
/// into a new immutable revision. A retry with the same `Idempotency-Key`
/// returns the first call's revision (200 instead of 201).
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents/{name}/deploy", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = Option<DeployRequest>),
    responses((status = 201, body = AgentRevision), (status = 200, body = AgentRevision),
              (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn deploy(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    headers: HeaderMap,
    OptionalBody(body): OptionalBody<DeployRequest>,
) -> ApiResult<Response> {
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError(ServiceError::InvalidArgument {
                        field: "Idempotency-Key".into(),
                        reason: "must be visible ASCII".into(),
                    })
                })?
                .to_owned(),
        ),
    };
    let (revision, was_created) = s
        .service
        .deploy(&p, &ns, &name, body.or_default(), key)
        .await?;
    let status = if was_created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(revision)).into_response())
}

/// Stop an Agent.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents/{name}/stop", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = Agent), (status = 404, body = ErrorBody)))]
async fn stop(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<Agent>> {
    Ok(Json(s.service.stop(&p, &ns, &name).await?))
}

/// List an Agent's revisions, oldest first.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/revisions", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = List<AgentRevision>), (status = 404, body = ErrorBody)))]
async fn list_revisions(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<List<AgentRevision>>> {
    Ok(Json(s.service.list_revisions(&p, &ns, &name).await?.into()))
}

/// Get one revision.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/revisions/{number}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path), ("number" = i64, Path, minimum = 1)),
    responses((status = 200, body = AgentRevision), (status = 404, body = ErrorBody)))]
async fn get_revision(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name, number)): PathParams<(String, String, String)>,
) -> ApiResult<Json<AgentRevision>> {
    let number = parse_number("number", &number)?;
    Ok(Json(s.service.get_revision(&p, &ns, &name, number).await?))
}

// ---- credentials -------------------------------------------------------------

/// List an Agent's managed credentials: kind, version and when each was set,
/// never a value.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/credentials", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = List<CredentialMeta>), (status = 404, body = ErrorBody)))]
async fn list_credentials(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<List<CredentialMeta>>> {
    Ok(Json(
        s.service.list_credentials(&p, &ns, &name).await?.into(),
    ))
}

/// Set or replace a managed credential (`model-api-key`, or
/// `service-account` for dedicated-codex Agents). Write-only: the answer
/// is metadata; the value is never returned. The next deploy carries it.
#[utoipa::path(put, path = "/api/v1/namespaces/{ns}/agents/{name}/credentials/{kind}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path), ("kind" = CredentialKindParam, Path)),
    request_body = SetCredential,
    responses((status = 200, body = CredentialMeta), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_credential(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name, kind)): PathParams<(String, String, String)>,
    SecretBody(req): SecretBody<SetCredential>,
) -> ApiResult<Json<CredentialMeta>> {
    let value = SecretValue::new(req.value);
    Ok(Json(
        s.service
            .set_credential(&p, &ns, &name, &kind, value)
            .await?,
    ))
}

/// Delete a managed credential (revisions keep what they froze).
#[utoipa::path(delete, path = "/api/v1/namespaces/{ns}/agents/{name}/credentials/{kind}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path), ("kind" = CredentialKindParam, Path)),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn delete_credential(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name, kind)): PathParams<(String, String, String)>,
) -> ApiResult<StatusCode> {
    s.service.delete_credential(&p, &ns, &name, &kind).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The credentials a revision froze at deploy (metadata only).
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/revisions/{number}/credentials", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path), ("number" = i64, Path, minimum = 1)),
    responses((status = 200, body = List<CredentialMeta>), (status = 404, body = ErrorBody)))]
async fn list_revision_credentials(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name, number)): PathParams<(String, String, String)>,
) -> ApiResult<Json<List<CredentialMeta>>> {
    let number = parse_number("number", &number)?;
    Ok(Json(
        s.service
            .list_revision_credentials(&p, &ns, &name, number)
            .await?
            .into(),
    ))
}

/// Which revision to diagnose.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct DiagnoseParams {
    /// The revision number; absent: the active revision (else the latest).
    #[param(minimum = 1)]
    revision: Option<i64>,
}

/// Bounded diagnostics of one revision of the Agent (`revision`, else the
/// active, else the latest): its Harness Pod (read by the spoke) and its
/// Gateway Pod (read by the hub). Missing Pods and unreachable endpoints
/// are `unknown` checks; this never changes the deployment's status.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/diagnose", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path), DiagnoseParams),
    responses((status = 200, body = Diagnosis), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
async fn diagnose(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Params(q): Params<DiagnoseParams>,
) -> ApiResult<Json<Diagnosis>> {
    Ok(Json(s.service.diagnose(&p, &ns, &name, q.revision).await?))
}

/// One chat message to the Agent's active revision, answered by its
/// runtime: the hub sends it through the revision's spoke (embedded
/// OpenClaw) or to its Gateway (dedicated), with the revision's gateway
/// token, in `conversation` (history is kept per conversation). Needs
/// deploy rights; audited as `agent.chat` without the message. 409 when the
/// Agent has no active revision or the runtime answered with an error
/// (its status and body in the message); 503 when it cannot be reached.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents/{name}/chat", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    request_body = ChatRequest,
    responses((status = 200, body = ChatAnswer), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn chat(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Body(req): Body<ChatRequest>,
) -> ApiResult<Json<ChatAnswer>> {
    Ok(Json(s.service.chat(&p, &ns, &name, req).await?))
}

// ---- clusters, fleet, audit, work ----------------------------------------------

/// List enrolled execution clusters.
#[utoipa::path(get, path = "/api/v1/clusters", tag = "clusters",
    responses((status = 200, body = List<Cluster>)))]
async fn list_clusters(
    State(s): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<Json<List<Cluster>>> {
    Ok(Json(s.service.list_clusters(&p).await?.into()))
}

/// Get one cluster.
#[utoipa::path(get, path = "/api/v1/clusters/{name}", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 200, body = Cluster), (status = 404, body = ErrorBody)))]
async fn get_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Cluster>> {
    Ok(Json(s.service.get_cluster(&p, &name).await?))
}

/// Create a single-use, expiring bootstrap token to enroll a cluster.
#[utoipa::path(post, path = "/api/v1/clusters/{name}/bootstrap-tokens", tag = "clusters",
    params(("name" = String, Path, description = "The cluster's name: a DNS-1123 label.",
            min_length = 1, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")), request_body(content = Option<CreateBootstrapToken>),
    responses((status = 201, body = BootstrapTokenCreated), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn create_bootstrap_token(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
    OptionalBody(body): OptionalBody<CreateBootstrapToken>,
) -> ApiResult<Response> {
    Ok(created(
        s.service
            .create_bootstrap_token(&p, &name, body.or_default())
            .await?,
    ))
}

/// Approve a cluster's pending enrollment (tokens with `requireApproval`).
#[utoipa::path(post, path = "/api/v1/clusters/{name}/approve", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn approve_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    s.service.approve_cluster(&p, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Revoke a cluster: its stream closes within a second and it cannot
/// reconnect until re-enrolled.
#[utoipa::path(post, path = "/api/v1/clusters/{name}/revoke", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 200, body = Cluster), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn revoke_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Cluster>> {
    Ok(Json(s.service.revoke_cluster(&p, &name).await?))
}

/// Fleet-wide counts over what the caller may read.
#[utoipa::path(get, path = "/api/v1/fleet", tag = "fleet",
    responses((status = 200, body = FleetSummary)))]
async fn fleet(State(s): State<AppState>, Caller(p): Caller) -> ApiResult<Json<FleetSummary>> {
    Ok(Json(s.service.fleet_summary(&p).await?))
}

/// Where a watch starts and whether it follows.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct WatchParams {
    /// Stream the events after this cursor (an event's `cursor`, or the
    /// SSE `id`). Absent: only events from now on (or after the
    /// `Last-Event-ID` header's cursor); `0`: every kept event. A cursor
    /// older than the oldest kept event, or never given out, is a 410.
    #[param(minimum = 0)]
    cursor: Option<i64>,
    /// `false`: end the stream once it has caught up with the log.
    follow: Option<bool>,
}

/// Watch events as Server-Sent Events: each has `id` = its cursor,
/// `event` = its kind (`cluster.connected`, `cluster.offline`,
/// `cluster.revoked`, `revision.phase`, `readiness`, `work.failed`) and
/// `data` = the event as JSON (`cursor`, `at`, `namespace`, `cluster`,
/// `kind`, `body`; bodies: ClusterEvent, RevisionPhaseEvent,
/// ReadinessEvent, WorkFailedEvent). A tenant token sees its own
/// namespace's events and those of the clusters its revisions are placed
/// on. A client that leaves its stream's buffer full is cut off with a
/// final `relist` event (RelistEvent); it then re-lists, or watches again
/// from the cursor of the last event it received.
#[utoipa::path(get, path = "/api/v1/watch", tag = "watch", params(WatchParams),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream",
            body = String),
        (status = 410, description = "The cursor is older than the oldest kept event (or \
            ahead of the log): re-list, then watch without a cursor", body = ErrorBody)))]
async fn watch(
    State(s): State<AppState>,
    Caller(p): Caller,
    Params(q): Params<WatchParams>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    use crate::watch::Frame;
    use axum::response::sse::{Event, KeepAlive, Sse};
    let cursor = match (q.cursor, headers.get("last-event-id")) {
        (Some(c), _) => Some(c),
        (None, Some(v)) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .ok_or_else(|| ServiceError::InvalidArgument {
                    field: "Last-Event-ID".into(),
                    reason: "must be an event cursor (an integer)".into(),
                })?,
        ),
        (None, None) => None,
    };
    let subscription = s
        .service
        .watch(&p, cursor, q.follow.unwrap_or(true))
        .await?;
    let events = futures::StreamExt::map(subscription.into_stream(), |frame| {
        let event = match frame {
            // Encoded once per event for every stream (`SharedEvent`).
            Frame::Event(e) => Event::default()
                .id(e.cursor.to_string())
                .event(e.body.kind())
                .data(e.json()),
            // Serializing these types cannot fail; an empty event if it did.
            Frame::Relist(r) => Event::default()
                .event("relist")
                .json_data(crate::model::event::EventBody::Relist(r))
                .unwrap_or_default(),
            // The last event: the token was revoked or expired; a reconnect
            // gets the 401.
            Frame::Unauthenticated(reason) => Event::default()
                .event("error")
                .json_data(serde_json::json!({
                    "error": { "code": "unauthenticated", "message": reason }
                }))
                .unwrap_or_default(),
        };
        Ok::<_, std::convert::Infallible>(event)
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Filters of the audit listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct AuditParams {
    namespace: Option<String>,
    /// At most this many events (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// Audit events, newest first.
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", params(AuditParams),
    responses((status = 200, body = List<AuditEvent>), (status = 403, body = ErrorBody)))]
async fn list_audit(
    State(s): State<AppState>,
    Caller(p): Caller,
    Params(q): Params<AuditParams>,
) -> ApiResult<Json<List<AuditEvent>>> {
    Ok(Json(
        s.service
            .list_audit(&p, q.namespace.as_deref(), q.limit)
            .await?
            .into(),
    ))
}

/// Filters of the work listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct WorkParams {
    namespace: Option<String>,
    /// pending, claimed, done or failed.
    #[param(value_type = Option<crate::model::WorkState>)]
    state: Option<String>,
    /// At most this many items (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// Work items, newest first, with their last errors.
#[utoipa::path(get, path = "/api/v1/work", tag = "work", params(WorkParams),
    responses((status = 200, body = List<WorkItem>), (status = 400, body = ErrorBody)))]
async fn list_work(
    State(s): State<AppState>,
    Caller(p): Caller,
    Params(q): Params<WorkParams>,
) -> ApiResult<Json<List<WorkItem>>> {
    Ok(Json(
        s.service
            .list_work(&p, q.namespace.as_deref(), q.state.as_deref(), q.limit)
            .await?
            .into(),
    ))
}

/// One work item.
#[utoipa::path(get, path = "/api/v1/work/{id}", tag = "work", params(("id" = String, Path)),
    responses((status = 200, body = WorkItem), (status = 404, body = ErrorBody)))]
async fn get_work(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<WorkItem>> {
    Ok(Json(s.service.get_work(&p, &id).await?))
}
