//! Why a request to the hub failed, and how the CLI's exit code and the
//! retry rule read it.

use crate::api::error::ErrorBody;

/// Why a request to the hub (or a CLI command around it) failed, mapped
/// to the CLI's exit code.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The hub answered with an error.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// The command line or an input file is wrong.
    #[error("{0}")]
    Usage(String),
    /// The TLS handshake with the hub failed: its certificate is not
    /// trusted, or it refused ours.
    #[error("TLS with the hub at {server} failed: {reason}")]
    Tls { server: String, reason: String },
    /// The hub could not be reached.
    #[error("cannot reach the hub at {server}: {source}")]
    Unreachable {
        server: String,
        #[source]
        source: reqwest::Error,
    },
    /// Anything else (output encoding, unexpected response).
    #[error("{0}")]
    Other(String),
    /// A deploy got no answer in any attempt; the hub may still have saved
    /// it, so the key to repeat it with is part of the message.
    #[error(
        "{last}; gave up after {attempts} attempts. The hub may have saved the deploy: \
         repeat it with --idempotency-key {key} to get that revision instead of a new one"
    )]
    GaveUp {
        key: String,
        attempts: usize,
        /// The last attempt's error (shown in the message, decides the exit code).
        last: Box<ClientError>,
    },
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Api { .. } | Self::Other(_) => 1,
            Self::Usage(_) => 2,
            Self::Unreachable { .. } | Self::Tls { .. } => 3,
            Self::GaveUp { last, .. } => last.exit_code(),
        }
    }

    /// Whether the hub may not have answered, so repeating the same request
    /// can help: no connection, a timeout or a cut-off answer, a proxy's
    /// or the hub's "unavailable", or the hub's rate limit (429: refused
    /// before any work, so the same request later is safe). Any other 4xx
    /// never is: the hub did answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unreachable { source, .. } => !source.is_builder(),
            Self::Api { status, .. } => matches!(status, 429 | 502..=504),
            // Retrying does not make a certificate trusted.
            Self::Usage(_) | Self::Other(_) | Self::GaveUp { .. } | Self::Tls { .. } => false,
        }
    }
}

/// The error of a non-success answer: the API's error body, or the
/// body's text when it is not one.
pub(super) fn api_error(status: reqwest::StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => ClientError::Api {
            status: status.as_u16(),
            code: body.error.code,
            message: body.error.message,
        },
        Err(_) => ClientError::Api {
            status: status.as_u16(),
            code: "unknown".into(),
            message: String::from_utf8_lossy(bytes).trim().to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16) -> ClientError {
        ClientError::Api {
            status,
            code: "x".into(),
            message: "x".into(),
        }
    }

    #[test]
    fn only_a_missing_answer_or_a_rate_limit_is_retried() {
        for status in [429, 502, 503, 504] {
            assert!(api(status).is_retryable(), "{status}");
        }
        // The hub answered: repeating cannot change the outcome (a 409 for a
        // reused key, a 400 for a bad field, a 500 bug).
        for status in [400, 401, 403, 404, 409, 413, 500, 501] {
            assert!(!api(status).is_retryable(), "{status}");
        }
        assert!(!ClientError::Usage("x".into()).is_retryable());
        assert!(!ClientError::Other("x".into()).is_retryable());
    }

    #[test]
    fn giving_up_names_the_key_and_keeps_the_exit_code() {
        let err = ClientError::GaveUp {
            key: "k-123".into(),
            attempts: 3,
            last: Box::new(api(503)),
        };
        assert!(err.to_string().contains("--idempotency-key k-123"), "{err}");
        assert_eq!(err.exit_code(), 1);
        assert!(!err.is_retryable());
    }
}
