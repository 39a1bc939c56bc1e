//! How hub and spoke print an error with its causes, in logs, in the
//! reasons they record and report, and at each binary's edge: one line,
//! each cause once.

use std::error::Error;

/// `err` and each of its causes, joined by `: `. A cause whose text the
/// line already ends with (an error that prints its source too) is not
/// repeated.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !part.is_empty() && !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {0}")]
    struct Quiet(&'static str, #[source] std::io::Error);

    /// Prints its cause and exposes it as the source too.
    #[derive(Debug, thiserror::Error)]
    #[error("loud: {0}")]
    struct Loud(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Loud);

    #[test]
    fn each_cause_once() {
        let io = || std::io::Error::other("disk full");
        assert_eq!(chain(&Quiet("x", io())), "reading x: disk full");
        assert_eq!(chain(&Loud(io())), "loud: disk full");
        assert_eq!(chain(&Outer(Loud(io()))), "outer: loud: disk full");
        assert_eq!(chain(&io()), "disk full");
    }
}
