//! Why the hub ended a spoke's link stream or refused a link call, as a
//! typed reason on the wire: the value of the [`CLOSE_REASON_KEY`] metadata
//! entry of the gRPC status the hub sends. The spoke acts on this value,
//! never on the status message, which is for people and may change.
//!
//! A revoked certificate may also be refused in the TLS handshake, before
//! any gRPC status exists; the hub then sends the TLS `certificate_revoked`
//! alert, which the spoke recognises by type (see the spoke's `tls` module).

use std::fmt;
use std::str::FromStr;

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// The gRPC metadata key that carries a [`CloseReason`].
pub const CLOSE_REASON_KEY: &str = "clawfed-close-reason";

/// Why the hub ends a stream or refuses a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The cluster or its certificate is revoked: the spoke must stop and
    /// wait for an admin to re-enroll it; retrying cannot help.
    Revoked,
    /// A newer session of the same cluster took over this one.
    Replaced,
    /// The hub is shutting down (a live stream gets a `GoAway` instead).
    ShuttingDown,
    /// The client certificate expired: reconnect with the renewed one.
    CertificateExpired,
}

/// A close-reason value this side does not know (a newer peer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown close reason {0:?}")]
pub struct UnknownCloseReason(pub String);

impl CloseReason {
    /// Every reason.
    pub const ALL: [Self; 4] = [
        Self::Revoked,
        Self::Replaced,
        Self::ShuttingDown,
        Self::CertificateExpired,
    ];

    /// The wire form (the metadata value).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Revoked => "revoked",
            Self::Replaced => "replaced",
            Self::ShuttingDown => "shutting-down",
            Self::CertificateExpired => "certificate-expired",
        }
    }

    /// The gRPC code a status with this reason carries.
    pub fn code(self) -> Code {
        match self {
            Self::Revoked => Code::PermissionDenied,
            Self::Replaced => Code::Aborted,
            Self::ShuttingDown => Code::Unavailable,
            Self::CertificateExpired => Code::Unauthenticated,
        }
    }

    /// The status that ends a stream or refuses a call for this reason.
    pub fn status(self, message: impl Into<String>) -> Status {
        let mut status = Status::new(self.code(), message);
        status
            .metadata_mut()
            .insert(CLOSE_REASON_KEY, MetadataValue::from_static(self.as_str()));
        status
    }

    /// The reason `status` carries; `None` when it carries none, or one
    /// this side does not know (then it is an ordinary failure).
    pub fn of(status: &Status) -> Option<Self> {
        status
            .metadata()
            .get(CLOSE_REASON_KEY)?
            .to_str()
            .ok()?
            .parse()
            .ok()
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CloseReason {
    type Err = UnknownCloseReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownCloseReason(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through the HTTP/2 form tonic sends (trailers or a trailers-only
    /// response) and back, as the spoke receives it.
    fn over_the_wire(status: Status) -> Status {
        let response = status.into_http::<()>();
        Status::from_header_map(response.headers()).expect("a status in the headers")
    }

    #[test]
    fn every_reason_survives_the_wire() {
        for reason in CloseReason::ALL {
            let received = over_the_wire(reason.status("some words"));
            assert_eq!(CloseReason::of(&received), Some(reason));
            assert_eq!(received.code(), reason.code());
            assert_eq!(received.message(), "some words");
            assert_eq!(reason.as_str().parse::<CloseReason>(), Ok(reason));
        }
    }

    #[test]
    fn the_message_is_not_the_reason() {
        let plain = over_the_wire(Status::permission_denied("cluster revoked"));
        assert_eq!(CloseReason::of(&plain), None);
    }

    #[test]
    fn an_unknown_value_is_no_reason() {
        let mut status = Status::permission_denied("x");
        status
            .metadata_mut()
            .insert(CLOSE_REASON_KEY, MetadataValue::from_static("evicted"));
        assert_eq!(CloseReason::of(&over_the_wire(status)), None);
        assert_eq!(
            "Revoked".parse::<CloseReason>(),
            Err(UnknownCloseReason("Revoked".into()))
        );
    }
}
