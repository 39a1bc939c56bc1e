//! The seed's Compute Driver section (`deploy/examples/seed-compute-driver.yaml`,
//! the example of the OpenClaw Kubernetes Compute Driver's documentation,
//! byte for byte) with its one placeholder filled in, nothing else changed.

/// The section as the seed prints it.
pub const SECTION: &str = include_str!("../../deploy/examples/seed-compute-driver.yaml");

/// The seed's only placeholder.
pub const PROXY_PLACEHOLDER: &str = "<actual-proxy-source-cidr>";

/// The section with the trusted proxy placeholder replaced by `cidr`.
/// Panics if that changed anything else (the placeholder occurs once).
pub fn compute_driver_section(cidr: &str) -> String {
    assert_eq!(SECTION.matches(PROXY_PLACEHOLDER).count(), 1);
    let filled = SECTION.replacen(PROXY_PLACEHOLDER, cidr, 1);
    assert_eq!(
        filled.replacen(cidr, PROXY_PLACEHOLDER, 1),
        SECTION,
        "only the placeholder changed"
    );
    filled
}
