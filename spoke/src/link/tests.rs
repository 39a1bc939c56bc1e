//! Unit tests of the link (`super`): the apply queue, the heartbeat digest,
//! enrolment retries, renewal deadlines and how a session ended.

use super::applies::{enqueue, superseded_ack};
use super::enroll::{enroll_retryable, renew_attempt_timeout};
use super::session::{REPLACED_MIN_WAIT, SessionEnd, classify, go_away, replaced_wait};
use super::*;
use clawfed_proto::link::close::CloseReason;
use clawfed_proto::link::v1::spoke_message;
use std::collections::BTreeMap;

fn work(target: &str, generation: i64, sequence: u64) -> pb::Work {
    pb::Work {
        sequence,
        target: target.into(),
        generation,
        kind: "harness.apply".into(),
        spec: Vec::new(),
    }
}

/// Issue 31 item 3: an item left behind in the queue is handed back
/// (for its ack), never silently dropped: the hub frees its send slot
/// only on an ack.
#[test]
fn a_queued_item_a_newer_generation_replaces_is_handed_back() {
    let mut q = BTreeMap::new();
    assert!(enqueue(&mut q, work("t", 1, 10)).is_none());
    let dropped = enqueue(&mut q, work("t", 2, 11)).expect("gen 1 replaced");
    assert_eq!((dropped.generation, dropped.sequence), (1, 10));
    // An older one arriving after a newer waits is handed back itself.
    let dropped = enqueue(&mut q, work("t", 1, 12)).expect("older refused");
    assert_eq!(dropped.sequence, 12);
    assert!(enqueue(&mut q, work("other", 1, 13)).is_none());
    assert_eq!(q["t"].sequence, 11);
    // The same item again supersedes nothing (it would be acked unapplied).
    assert!(enqueue(&mut q, work("t", 2, 11)).is_none());
    let ack = superseded_ack(&dropped);
    assert!(matches!(
        ack.body,
        Some(spoke_message::Body::Ack(pb::Ack {
            sequence: 12,
            generation: 1,
            ..
        }))
    ));
}

#[test]
fn enrollment_retries_transport_failures_but_not_refusals() {
    use tonic::Code;
    for code in [
        Code::Unavailable,
        Code::Unknown,
        Code::Cancelled,
        Code::DeadlineExceeded,
    ] {
        assert!(enroll_retryable(code), "{code:?}");
    }
    for code in [
        Code::Unauthenticated,
        Code::InvalidArgument,
        Code::FailedPrecondition,
        Code::PermissionDenied,
    ] {
        assert!(!enroll_retryable(code), "{code:?}");
    }
}

#[test]
fn renewal_attempts_fit_several_times_in_the_renewal_window() {
    // A 45 s certificate renews with 15 s left: each attempt gets 3.75 s.
    let left = Duration::from_secs(15);
    assert!(renew_attempt_timeout(left) * 3 < left);
    // A day's certificate (8 h window): 30 s attempts.
    assert_eq!(
        renew_attempt_timeout(Duration::from_secs(8 * 3600)),
        Duration::from_secs(30)
    );
    assert_eq!(
        renew_attempt_timeout(Duration::ZERO),
        Duration::from_secs(1)
    );
}

fn classify_alone(status: tonic::Status) -> SessionEnd {
    classify(status, &tls::ReceivedAlert::default())
}

#[test]
fn a_revoked_close_reason_is_a_revocation() {
    assert!(matches!(
        classify_alone(CloseReason::Revoked.status("cluster revoked")),
        SessionEnd::Revoked(m) if m == "cluster revoked"
    ));
}

#[test]
fn the_word_revoked_without_a_reason_is_not_a_revocation() {
    for status in [
        tonic::Status::permission_denied("cluster revoked"),
        tonic::Status::unknown("transport error: received fatal alert: CertificateRevoked"),
    ] {
        assert!(matches!(classify_alone(status), SessionEnd::Failed(_)));
    }
}

#[test]
fn a_replaced_close_is_told_apart() {
    assert!(matches!(
        classify_alone(CloseReason::Replaced.status("newer session")),
        SessionEnd::Replaced(m) if m == "replaced: newer session"
    ));
}

#[test]
fn after_a_replaced_close_the_spoke_waits_long_with_jitter() {
    let short = Duration::from_millis(500);
    assert_eq!(replaced_wait(short, 0.0), REPLACED_MIN_WAIT);
    assert_eq!(replaced_wait(short, 0.5), REPLACED_MIN_WAIT * 3 / 2);
    assert_eq!(replaced_wait(short, 7.0), REPLACED_MIN_WAIT * 2);
    // The production cap (30 s) is longer: from there.
    let cap = Duration::from_secs(30);
    assert_eq!(replaced_wait(cap, 0.0), cap);
    assert!(replaced_wait(cap, 0.999) < cap * 2);
    // Far longer than any ordinary reconnect (full jitter under the cap).
    assert!(replaced_wait(short, 0.0) > short * 10);
}

#[test]
fn a_go_away_carries_its_redirect() {
    let g = |url: &str| pb::GoAway {
        reason: "x".into(),
        retry_after_seconds: 2,
        redirect_url: url.into(),
    };
    assert!(matches!(
        go_away(g("https://b:2")),
        SessionEnd::GoAway(d, Some(u)) if d == Duration::from_secs(2) && u == "https://b:2"
    ));
    assert!(matches!(go_away(g("")), SessionEnd::GoAway(_, None)));
}

#[test]
fn other_close_reasons_are_retried() {
    for reason in [CloseReason::ShuttingDown, CloseReason::CertificateExpired] {
        assert!(matches!(
            classify_alone(reason.status("x")),
            SessionEnd::Failed(m) if m.starts_with(reason.as_str())
        ));
    }
    assert!(matches!(
        classify_alone(tonic::Status::unavailable("down")),
        SessionEnd::Failed(_)
    ));
}

#[test]
fn a_revoked_alert_on_the_connection_is_a_revocation() {
    // A call over a connection the hub refused fails in the transport
    // with a status that says so only in words; the alert itself was
    // noted by type on the connection.
    let alert = |description| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(description),
        )
    };
    let transport = || tonic::Status::unknown("transport error");
    let revoked = tls::ReceivedAlert::default();
    revoked.note(&alert(rustls::AlertDescription::CertificateRevoked));
    assert!(matches!(
        classify(transport(), &revoked),
        SessionEnd::Revoked(_)
    ));
    let unknown_ca = tls::ReceivedAlert::default();
    unknown_ca.note(&alert(rustls::AlertDescription::UnknownCA));
    assert!(matches!(
        classify(transport(), &unknown_ca),
        SessionEnd::Failed(_)
    ));
    // A typed reason wins over what the connection saw.
    assert!(matches!(
        classify(CloseReason::ShuttingDown.status("x"), &revoked),
        SessionEnd::Failed(_)
    ));
}
