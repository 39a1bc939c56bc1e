//! REST handlers of Agents' managed credentials (write-only; answers carry
//! metadata only).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::extract::{Caller, PathParams, SecretBody};
use super::{ApiResult, parse_number};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::{CredentialMeta, List, SetCredential};
use crate::secrets::SecretValue;

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

/// List an Agent's managed credentials: kind, version and when each was set,
/// never a value.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/credentials", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = List<CredentialMeta>), (status = 404, body = ErrorBody)))]
pub(super) async fn list_credentials(
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
pub(super) async fn set_credential(
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
pub(super) async fn delete_credential(
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
pub(super) async fn list_revision_credentials(
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
