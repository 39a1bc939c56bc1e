//! The clawfed contract that hub and spoke both import.
//!
//! # Layout
//! - [`admin`]: generated `clawfed.admin.v1` gRPC types and service.
//! - [`link`]: generated `clawfed.link.v1` types for the hub/spoke stream.
//! - [`labels`]: the Kubernetes label and annotation keys clawfed owns.
//! - [`naming`]: name validation and the data-plane namespace rule.
//! - [`readiness`]: the Harness readiness contract, a pure function.
//! - [`work`]: typed work specs carried in `link.v1.Work.spec`.
//!
//! Nothing here performs I/O.

pub mod labels;
pub mod naming;
pub mod readiness;
pub mod work;

/// `clawfed.admin.v1`: the admin API, same semantics as REST `/api/v1`.
pub mod admin {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("clawfed.admin.v1");
    }
}

/// `clawfed.link.v1`: the spoke link.
pub mod link {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("clawfed.link.v1");
    }
}
