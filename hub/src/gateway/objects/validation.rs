//! The checks before anything is built: the Gateway settings once, the
//! names derived from an Agent, and each spec against the settings (fails
//! closed).

use clawfed_proto::naming::{validate_agent_name, validate_dns1123_label};
use clawfed_proto::work::check_image_digest;

use super::{Error, MAX_TRANSPORT_PREFIX, Result, names, route_api_resource, service_name};
use crate::gateway::{GatewayConfig, GatewaySpec};

fn name_error(what: &'static str, value: &str, e: impl ToString) -> Error {
    Error::Name {
        what,
        value: value.to_string(),
        reason: e.to_string(),
    }
}

/// Checks the agent name and the names derived from it for `revision`.
pub fn validate_names(agent: &str, revision: i64) -> Result<()> {
    validate_agent_name(agent).map_err(|e| name_error("agent", agent, e))?;
    if revision < 0 {
        return Err(Error::Invalid {
            field: "revision",
            reason: format!("negative revision {revision}"),
        });
    }
    let n = names(agent);
    for name in [
        n.gateway,
        n.transport,
        n.data,
        n.route,
        service_name(agent, revision),
    ] {
        validate_dns1123_label(&name).map_err(|e| name_error("object name", &name, e))?;
    }
    Ok(())
}

/// Checks the Gateway settings once, when [`crate::gateway::Gateways`] is built.
pub fn validate_config(c: &GatewayConfig) -> Result<()> {
    if let Some(old) = &c.namespace {
        return Err(Error::Invalid {
            field: "gateways.namespace",
            reason: format!(
                "{old:?}: one shared Gateway namespace is no longer used; each tenant's Gateways run in its own namespace <namespacePrefix>-<24 hex>, set gateways.namespacePrefix (default {})",
                clawfed_proto::naming::GATEWAY_NAMESPACE_PREFIX
            ),
        });
    }
    validate_dns1123_label(&c.namespace_prefix)
        .map_err(|e| name_error("namespacePrefix", &c.namespace_prefix, e))?;
    let max = clawfed_proto::naming::MAX_GATEWAY_NAMESPACE_PREFIX_LEN;
    if c.namespace_prefix.len() > max {
        return Err(Error::Invalid {
            field: "gateways.namespacePrefix",
            reason: format!(
                "{:?} is longer than {max} characters (<prefix>-<24 hex> must fit 63)",
                c.namespace_prefix
            ),
        });
    }
    validate_dns1123_label(&c.runtime_cluster_role)
        .map_err(|e| name_error("runtimeClusterRole", &c.runtime_cluster_role, e))?;
    validate_dns1123_label(&c.service_account.namespace)
        .map_err(|e| name_error("serviceAccount.namespace", &c.service_account.namespace, e))?;
    validate_dns1123_label(&c.service_account.name)
        .map_err(|e| name_error("serviceAccount.name", &c.service_account.name, e))?;
    if !(1..=65535).contains(&c.port) {
        return Err(Error::Invalid {
            field: "gateways.port",
            reason: format!("{} is not a TCP port", c.port),
        });
    }
    for cidr in c
        .trusted_proxy_cidrs
        .iter()
        .chain(c.harness_egress.iter().map(|r| &r.cidr))
    {
        validate_cidr(cidr)?;
    }
    for name in &c.image_pull_secrets {
        validate_dns_subdomain(name).map_err(|reason| Error::Invalid {
            field: "gateways.imagePullSecrets",
            reason: format!("{name:?}: {reason}"),
        })?;
    }
    for client in &c.clients {
        validate_dns1123_label(&client.namespace)
            .map_err(|e| name_error("clients.namespace", &client.namespace, e))?;
        if client.pod_labels.is_empty() {
            // An empty selector would admit every Pod of the namespace.
            return Err(Error::Invalid {
                field: "gateways.clients.podLabels",
                reason: format!("must not be empty (client namespace {})", client.namespace),
            });
        }
    }
    if let Some(prefix) = &c.transport_secret_prefix {
        validate_dns1123_label(prefix)
            .map_err(|e| name_error("transportSecretPrefix", prefix, e))?;
        if prefix.len() > MAX_TRANSPORT_PREFIX {
            return Err(Error::Invalid {
                field: "gateways.transportSecretPrefix",
                reason: format!("{prefix:?} is longer than {MAX_TRANSPORT_PREFIX} characters"),
            });
        }
    }
    if let Some(sp) = &c.service_principal {
        if sp.audience.is_empty() {
            return Err(Error::Invalid {
                field: "gateways.servicePrincipal.audience",
                reason: "must not be empty".into(),
            });
        }
        clawfed_kube::token::check_expiration(sp.expiration_seconds).map_err(|e| {
            Error::Invalid {
                field: "gateways.servicePrincipal.expirationSeconds",
                reason: e.to_string(),
            }
        })?;
    }
    if let Some(image) = &c.default_image
        && c.require_immutable_digest
    {
        check_image_digest(image).map_err(Error::Digest)?;
    }
    if let Some(r) = &c.private_routing {
        route_api_resource(&r.api_version)?;
        validate_dns1123_label(&r.gateway_namespace)
            .map_err(|e| name_error("gateway namespace", &r.gateway_namespace, e))?;
        if r.gateway_name.is_empty() || r.hostname_suffix.is_empty() {
            return Err(Error::Invalid {
                field: "gateways.privateRouting",
                reason: "gatewayName and hostnameSuffix are required".into(),
            });
        }
    }
    Ok(())
}

/// A DNS subdomain (an object name such as a Secret's).
fn validate_dns_subdomain(name: &str) -> std::result::Result<(), String> {
    if clawfed_proto::naming::is_dns1123_subdomain(name) {
        Ok(())
    } else {
        Err("is not a DNS subdomain (a Secret name)".into())
    }
}

fn validate_cidr(cidr: &str) -> Result<()> {
    if clawfed_proto::naming::is_cidr(cidr) {
        Ok(())
    } else {
        Err(Error::Invalid {
            field: "cidr",
            reason: format!("{cidr:?} is not an IP/prefix CIDR"),
        })
    }
}

/// Checks a spec against the config before anything is applied and returns
/// the image to run.
pub fn validate(spec: &GatewaySpec, c: &GatewayConfig) -> Result<String> {
    validate_names(&spec.agent, spec.revision)?;
    validate_dns1123_label(&spec.tenant).map_err(|e| name_error("tenant", &spec.tenant, e))?;
    let image = spec
        .image
        .clone()
        .or_else(|| c.default_image.clone())
        .ok_or(Error::NoImage)?;
    if c.require_immutable_digest {
        check_image_digest(&image).map_err(Error::Digest)?;
    }
    validate_endpoint("harnessEndpoint", &spec.harness_endpoint)?;
    if let Some(proxy) = &spec.tunnel_proxy {
        validate_endpoint("tunnelProxy", proxy)?;
    }
    if spec.transport.gateway_token.is_empty() {
        return Err(Error::Invalid {
            field: "transport.gatewayToken",
            reason: "must not be empty".into(),
        });
    }
    Ok(image)
}

/// The Harness endpoint goes into the Pod environment, so it must never
/// carry credentials (`user:pass@`).
fn validate_endpoint(field: &'static str, url: &str) -> Result<()> {
    let invalid = |reason: &str| Error::Invalid {
        field,
        reason: reason.to_string(),
    };
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| invalid("must start with http:// or https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err(invalid("has no host"));
    }
    if authority.contains('@') {
        return Err(invalid("must not carry credentials (userinfo)"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("contains whitespace or control characters"));
    }
    Ok(())
}
