//! The OpenAPI document's frame: its info, bearer security and the error
//! answers every operation can give; and the document as served, with the
//! checks the types do not carry stated in it.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::error::ErrorBody;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "clawfed hub API",
        description = "Desired state of tenants, Agents and AgentRevisions; fleet status. \
                       Same semantics as the gRPC service clawfed.admin.v1.AdminService. \
                       Every query parameter an operation accepts is listed; any other is \
                       refused with 400 (a misspelt filter never lists everything)."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(
        ErrorBody,
        crate::model::event::ClusterEvent,
        crate::model::event::SchedulingEvent,
        crate::model::event::RevisionPhaseEvent,
        crate::model::event::ReadinessEvent,
        crate::model::event::WorkFailedEvent,
        crate::model::event::RelistEvent
    ))
)]
pub(super) struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The error answers every operation can give, so the document lists them
/// without each handler repeating them: 401 and 403 everywhere (every
/// operation needs a token with a permission), 400 where there is a
/// parameter or a body to refuse, 404 where a path names something, 413
/// where there is a body. Answers a handler documents itself (409, or a
/// 400 with its own description) are kept.
pub(super) struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::{Operation, ParameterIn};
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

        let answer = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        let add = |op: &mut Operation| {
            let params = op.parameters.as_deref().unwrap_or_default();
            let in_path = params
                .iter()
                .any(|p| matches!(p, RefOr::T(p) if p.parameter_in == ParameterIn::Path));
            let has_body = op.request_body.is_some();
            let mut wanted = vec![
                ("401", "No token, or an unknown, expired or revoked one"),
                ("403", "The token lacks the permission"),
                (
                    "429",
                    "Over a rate limit (`api.rateLimit`); `Retry-After` gives the seconds to wait",
                ),
            ];
            if !params.is_empty() || has_body {
                wanted.push((
                    "400",
                    "A parameter or the body is invalid (`error.field` names it)",
                ));
            }
            if in_path {
                wanted.push(("404", "What the path names does not exist"));
            }
            if has_body {
                wanted.push(("413", "The body is larger than `api.maxBodyBytes`"));
            }
            for (status, description) in wanted {
                op.responses
                    .responses
                    .entry(status.to_owned())
                    .or_insert_with(|| answer(description));
            }
        };
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                add(op);
            }
        }
    }
}

/// The document as served: `doc` with the checks the types do not carry
/// stated in it (the patterns of [`crate::service::patterns`], the rules
/// of [`crate::service::validate`]), and what this installation checks:
/// with no default agent image (`images.agent`), `spec.image` is required
/// and may not be empty.
pub fn served_document(
    doc: &utoipa::openapi::OpenApi,
    policy: &crate::service::Policy,
) -> serde_json::Value {
    use crate::service::patterns;
    use serde_json::json;
    let mut doc = serde_json::to_value(doc).unwrap_or_default();
    let schemas = &mut doc["components"]["schemas"];
    let dns_label = json!({ "minLength": 1, "maxLength": 63, "pattern": patterns::DNS_LABEL });
    let labels = json!({
        "propertyNames": { "pattern": patterns::LABEL_KEY },
        "additionalProperties": { "type": "string", "pattern": patterns::LABEL_VALUE },
    });
    let image = |pattern: &str| json!({ "maxLength": patterns::IMAGE_MAX, "pattern": pattern });
    let state = |schema: &mut serde_json::Value, rules: serde_json::Value| {
        if let (Some(schema), Some(rules)) = (schema.as_object_mut(), rules.as_object()) {
            schema.extend(rules.clone());
        }
    };
    let spec = &mut schemas["AgentSpec"]["properties"];
    state(&mut spec["image"], image(patterns::IMAGE_OR_EMPTY));
    state(&mut spec["gatewayImage"], image(patterns::IMAGE));
    state(&mut spec["configuration"], dns_label.clone());
    state(&mut spec["requirementLabels"], labels.clone());
    state(
        &mut spec["plugins"],
        json!({ "items": { "type": "string", "minLength": 1, "maxLength": 63,
                           "pattern": patterns::DNS_LABEL },
                "uniqueItems": true }),
    );
    let placement = &mut schemas["Placement"]["properties"];
    state(&mut placement["cluster"], dns_label.clone());
    state(
        &mut placement["clusters"],
        json!({ "items": dns_label, "uniqueItems": true }),
    );
    state(&mut placement["clusterSelector"], labels);
    for field in ["cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit"] {
        state(
            &mut schemas["Resources"]["properties"][field],
            json!({ "pattern": patterns::QUANTITY }),
        );
    }
    if policy.default_agent_image.is_none() {
        let spec = &mut schemas["AgentSpec"];
        state(
            &mut spec["properties"]["image"],
            json!({
                "minLength": 1,
                "description": "Harness image reference; `name@sha256:<64 hex>` pins a digest. \
                                Required: this installation has no default agent image \
                                (`images.agent`)."
            }),
        );
        if let Some(required) = spec["required"].as_array_mut()
            && !required.contains(&json!("image"))
        {
            required.push(json!("image"));
        }
    }
    doc
}
