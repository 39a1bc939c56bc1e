//! The extractors of the REST handlers: the authenticated caller, JSON
//! bodies (plain, optional, secret), query and path parameters. Each
//! refusal is a JSON error naming what it refused.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::ApiResult;
use crate::api::AppState;
use crate::api::error::{ApiError, ErrorCode};
use crate::auth::Principal;
use crate::model::Object;
use crate::service::ServiceError;

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
            .get::<axum::extract::ConnectInfo<crate::api::tls::TlsPeer>>()
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
    pub(super) fn or_default(self) -> T {
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
