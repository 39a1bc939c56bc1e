//! Capabilities a spoke advertises in `Hello.capabilities`, and what a
//! revision needs of them. The hub places a revision only on a cluster
//! whose spoke advertises every capability the revision needs, and names
//! the missing ones when it refuses.

/// Prefix of the SandboxDriver the spoke runs: `sandbox-driver:<name>`.
pub const SANDBOX_DRIVER_PREFIX: &str = "sandbox-driver:";
/// The SandboxDriver provisions Harnesses itself (provider execution).
pub const SANDBOX_PROVISIONS: &str = "sandbox-provisions";
/// The SandboxDriver contains the Harness's network (only the flows the
/// Harness needs).
pub const CONTAINMENT_NETWORKING: &str = "sandbox-containment:networking";
/// The SandboxDriver contains the Harness's filesystem (nothing of the node,
/// no writable image).
pub const CONTAINMENT_FILESYSTEM: &str = "sandbox-containment:filesystem";
/// The SandboxDriver contains the Harness's processes (own process and
/// kernel boundary).
pub const CONTAINMENT_PROCESS: &str = "sandbox-containment:process";

/// Every containment a driver may declare.
pub const ALL_CONTAINMENT: [&str; 3] = [
    CONTAINMENT_NETWORKING,
    CONTAINMENT_FILESYSTEM,
    CONTAINMENT_PROCESS,
];

/// Prefix of what applies the hub's work: `applier:<name>`.
pub const APPLIER_PREFIX: &str = "applier:";

/// `applier:<name>` (`kube`, `ledger`).
pub fn applier(name: &str) -> String {
    format!("{APPLIER_PREFIX}{name}")
}

/// `sandbox-driver:<name>`.
pub fn sandbox_driver(name: &str) -> String {
    format!("{SANDBOX_DRIVER_PREFIX}{name}")
}

/// The SandboxDriver (provider) name among `advertised` capabilities, if
/// the spoke runs one (the first when it says several).
pub fn sandbox_driver_of<S: AsRef<str>>(advertised: &[S]) -> Option<&str> {
    advertised
        .iter()
        .find_map(|c| c.as_ref().strip_prefix(SANDBOX_DRIVER_PREFIX))
        .filter(|name| !name.is_empty())
}

/// What a revision's Harness needs of its cluster's spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// Provider execution: a SandboxDriver that provisions Harnesses.
    pub provisioning_driver: bool,
    /// Dedicated native OpenClaw: networking, filesystem and process
    /// containment declared by that driver.
    pub containment: bool,
}

impl Needs {
    /// The capabilities these needs require.
    pub fn required(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.provisioning_driver {
            out.push(SANDBOX_PROVISIONS);
        }
        if self.containment {
            out.extend(ALL_CONTAINMENT);
        }
        out
    }

    /// The required capabilities `advertised` lacks (empty: it can serve).
    pub fn missing<S: AsRef<str>>(&self, advertised: &[S]) -> Vec<&'static str> {
        self.required()
            .into_iter()
            .filter(|need| !advertised.iter().any(|a| a.as_ref() == *need))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_the_sandbox_driver_capability() {
        assert_eq!(sandbox_driver_of::<&str>(&[]), None);
        assert_eq!(
            sandbox_driver_of(&["applier:kube", SANDBOX_PROVISIONS]),
            None
        );
        assert_eq!(sandbox_driver_of(&["sandbox-driver:"]), None);
        let advertised = ["applier:kube".to_owned(), sandbox_driver("kata")];
        assert_eq!(sandbox_driver_of(&advertised), Some("kata"));
    }

    #[test]
    fn missing_names_what_a_cluster_lacks() {
        let ordinary = Needs::default();
        assert!(ordinary.missing::<&str>(&[]).is_empty());
        let native = Needs {
            provisioning_driver: true,
            containment: true,
        };
        assert_eq!(
            native.missing(&[
                "sandbox-driver:crd",
                SANDBOX_PROVISIONS,
                CONTAINMENT_PROCESS
            ]),
            vec![CONTAINMENT_NETWORKING, CONTAINMENT_FILESYSTEM]
        );
        let mut all = vec![SANDBOX_PROVISIONS];
        all.extend(ALL_CONTAINMENT);
        assert!(native.missing(&all).is_empty());
    }
}
