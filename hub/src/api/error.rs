//! One table maps every service error to an HTTP status and a gRPC code, so
//! REST and gRPC report the same failure the same way, and no client error
//! becomes a 500.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::service::ServiceError;

/// A service error on its way to a client.
#[derive(Debug)]
pub struct ApiError(pub ServiceError);

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        Self(e)
    }
}

/// The codes both APIs speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    Unauthenticated,
    PermissionDenied,
    NotFound,
    AlreadyExists,
    Conflict,
    FailedPrecondition,
    PayloadTooLarge,
    Unavailable,
    /// Over a rate limit (HTTP 429 with `Retry-After`).
    ResourceExhausted,
    /// Over a tenant quota (HTTP 403; gRPC RESOURCE_EXHAUSTED).
    QuotaExceeded,
    /// A watch cursor older than the kept log (HTTP 410 Gone).
    OutOfRange,
    Internal,
}

impl ErrorCode {
    /// The code of a service error.
    pub fn of(err: &ServiceError) -> Self {
        match err {
            ServiceError::InvalidArgument { .. } => Self::InvalidArgument,
            ServiceError::Unauthenticated(_) => Self::Unauthenticated,
            ServiceError::PermissionDenied(_) => Self::PermissionDenied,
            ServiceError::NotFound(_) => Self::NotFound,
            ServiceError::AlreadyExists(_) => Self::AlreadyExists,
            ServiceError::Conflict(_) => Self::Conflict,
            ServiceError::FailedPrecondition(_) => Self::FailedPrecondition,
            ServiceError::Unavailable(_) => Self::Unavailable,
            ServiceError::RateLimited(_) => Self::ResourceExhausted,
            ServiceError::QuotaExceeded(_) => Self::QuotaExceeded,
            ServiceError::OutOfRange(_) => Self::OutOfRange,
            ServiceError::Internal(_) => Self::Internal,
        }
    }

    /// The machine-readable name in REST bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::Unauthenticated => "unauthenticated",
            Self::PermissionDenied => "permission_denied",
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::Conflict => "conflict",
            Self::FailedPrecondition => "failed_precondition",
            Self::PayloadTooLarge => "payload_too_large",
            Self::Unavailable => "unavailable",
            Self::ResourceExhausted => "resource_exhausted",
            Self::QuotaExceeded => "quota_exceeded",
            Self::OutOfRange => "out_of_range",
            Self::Internal => "internal",
        }
    }

    /// The HTTP status.
    pub fn http_status(self) -> StatusCode {
        match self {
            Self::InvalidArgument => StatusCode::BAD_REQUEST,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::PermissionDenied | Self::QuotaExceeded => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::AlreadyExists | Self::Conflict | Self::FailedPrecondition => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Self::OutOfRange => StatusCode::GONE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code.
    pub fn grpc_code(self) -> tonic::Code {
        match self {
            Self::InvalidArgument => tonic::Code::InvalidArgument,
            Self::Unauthenticated => tonic::Code::Unauthenticated,
            Self::PermissionDenied => tonic::Code::PermissionDenied,
            Self::NotFound => tonic::Code::NotFound,
            Self::AlreadyExists => tonic::Code::AlreadyExists,
            Self::Conflict => tonic::Code::Aborted,
            Self::FailedPrecondition => tonic::Code::FailedPrecondition,
            Self::PayloadTooLarge => tonic::Code::ResourceExhausted,
            Self::Unavailable => tonic::Code::Unavailable,
            Self::ResourceExhausted | Self::QuotaExceeded => tonic::Code::ResourceExhausted,
            Self::OutOfRange => tonic::Code::OutOfRange,
            Self::Internal => tonic::Code::Internal,
        }
    }
}

/// The JSON body of every REST error.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable code, e.g. `invalid_argument`.
    pub code: String,
    pub message: String,
    /// The offending field, for `invalid_argument`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The quota, its limit and what is in use, for `quota_exceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<crate::quota::QuotaItem>,
}

impl ApiError {
    fn field(&self) -> Option<String> {
        match &self.0 {
            ServiceError::InvalidArgument { field, .. } => Some(field.clone()),
            _ => None,
        }
    }

    /// Seconds to wait before retrying, for a rate-limited request.
    fn retry_after_secs(&self) -> Option<u64> {
        match &self.0 {
            ServiceError::RateLimited(limited) => Some(limited.retry_after_secs()),
            _ => None,
        }
    }

    /// The message shown to clients; internal details stay in the log.
    fn message(&self) -> String {
        self.0.to_string()
    }

    /// An error with an explicit code (REST-only conditions such as body size).
    pub fn response(code: ErrorCode, message: String, field: Option<String>) -> Response {
        Self::response_with(
            code,
            ErrorDetail {
                code: code.as_str().into(),
                message,
                field,
                quota: None,
            },
        )
    }

    fn response_with(code: ErrorCode, detail: ErrorDetail) -> Response {
        let body = ErrorBody { error: detail };
        let mut response = (code.http_status(), Json(body)).into_response();
        if code == ErrorCode::Unauthenticated {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"clawfed\""),
            );
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = ErrorCode::of(&self.0);
        let quota = match &self.0 {
            ServiceError::QuotaExceeded(q) => Some(crate::quota::QuotaItem {
                name: q.kind.as_str().to_owned(),
                limit: Some(q.limit),
                used: q.used,
            }),
            _ => None,
        };
        let detail = ErrorDetail {
            code: code.as_str().into(),
            message: self.message(),
            field: self.field(),
            quota,
        };
        let mut response = Self::response_with(code, detail);
        if let Some(secs) = self.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The gRPC metadata key that carries a rate-limited call's wait, in whole
/// seconds (as REST's `Retry-After`).
pub const GRPC_RETRY_AFTER: &str = "retry-after";

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Some(secs) = e.retry_after_secs() {
            metadata.insert(GRPC_RETRY_AFTER, secs.into());
        }
        tonic::Status::with_metadata(ErrorCode::of(&e.0).grpc_code(), e.message(), metadata)
    }
}

impl From<ServiceError> for tonic::Status {
    fn from(e: ServiceError) -> Self {
        ApiError(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_are_never_server_errors() {
        let client = [
            ServiceError::InvalidArgument {
                field: "f".into(),
                reason: "r".into(),
            },
            ServiceError::Unauthenticated("x".into()),
            ServiceError::PermissionDenied("x".into()),
            ServiceError::NotFound("x".into()),
            ServiceError::AlreadyExists("x".into()),
            ServiceError::Conflict("x".into()),
            ServiceError::FailedPrecondition("x".into()),
        ];
        for err in client {
            let code = ErrorCode::of(&err);
            assert!(code.http_status().is_client_error(), "{err:?}");
            assert_ne!(code.grpc_code(), tonic::Code::Internal);
        }
        assert_eq!(
            ErrorCode::of(&ServiceError::Unauthenticated("x".into())).http_status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            ErrorCode::of(&ServiceError::PermissionDenied("x".into())).http_status(),
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn internal_details_are_not_shown() {
        let err = ApiError(ServiceError::Internal("password=hunter2".into()));
        assert_eq!(err.message(), "internal error");
    }
}
