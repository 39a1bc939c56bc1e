//! Private routing: the revision a route points at, and activation, which
//! switches it. Activation checks that the route API is served (discovery)
//! and that the hub may write routes (SelfSubjectAccessReview) BEFORE the
//! route is touched, so a missing CRD or permission leaves the route as it
//! was and fails with a reason; routing is never silently skipped.

use futures::future::try_join_all;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PostParams};

use clawfed_kube::{RequestError, is_not_found};

use clawfed_proto::labels;

use super::client::{Activation, TenantGateways, WRITE_VERBS, apply_params, label_of};
use super::error::{Error, Result};
use super::objects::{self, ROUTE_KIND, ROUTE_PLURAL};
use super::ready::Readiness;

impl TenantGateways {
    /// Checks that private routing can work: the route API is served
    /// (discovery) and the hub may get, create, patch and delete routes in
    /// the gateway namespace (SelfSubjectAccessReview). Returns false when
    /// private routing is not configured.
    pub async fn check_routing(&self) -> Result<bool> {
        if self.config.private_routing.is_none() {
            return Ok(false);
        }
        if self.passed.routing.fresh(self.ns()) {
            return Ok(true);
        }
        let verdict = self.check_routing_now().await;
        self.passed
            .routing
            .set(self.ns(), matches!(verdict, Ok(true)));
        verdict
    }

    async fn check_routing_now(&self) -> Result<bool> {
        let Some(routing) = &self.config.private_routing else {
            return Ok(false);
        };
        let ar = objects::route_api_resource(&routing.api_version)?;
        let missing = |reason: String| Error::RouteApiMissing {
            kind: ROUTE_KIND,
            api_version: routing.api_version.clone(),
            reason,
        };
        match self
            .client
            .list_api_group_resources(&routing.api_version)
            .await
        {
            Ok(list) => {
                if !list
                    .resources
                    .iter()
                    .any(|r| r.name == ROUTE_PLURAL && r.kind == ROUTE_KIND)
                {
                    return Err(missing(format!(
                        "{} is served but has no {ROUTE_PLURAL} resource",
                        routing.api_version
                    )));
                }
            }
            Err(e) if is_not_found(&e) => {
                return Err(missing("discovery has no such API group/version".into()));
            }
            Err(e) => {
                return Err(
                    RequestError::new("discover", ROUTE_KIND, "", &routing.api_version, e).into(),
                );
            }
        }
        let reviews = WRITE_VERBS.map(|verb| self.access_review(&ar.group, ROUTE_PLURAL, verb));
        let denied: Vec<(&str, String)> = try_join_all(reviews)
            .await?
            .into_iter()
            .zip(WRITE_VERBS)
            .filter_map(|(answer, verb)| answer.map(|reason| (verb, reason)))
            .collect();
        if denied.is_empty() {
            return Ok(true);
        }
        let reason = denied
            .iter()
            .map(|(_, r)| r.as_str())
            .find(|r| !r.is_empty())
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        Err(Error::RouteForbidden {
            namespace: self.ns().to_string(),
            verbs: denied
                .iter()
                .map(|(v, _)| *v)
                .collect::<Vec<_>>()
                .join(", "),
            reason,
        })
    }

    /// `None` when `verb` on `group`/`resource` in the Gateway namespace is
    /// allowed, else the authorizer's reason.
    pub(super) async fn access_review(
        &self,
        group: &str,
        resource: &str,
        verb: &str,
    ) -> Result<Option<String>> {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_string()),
                    resource: Some(resource.into()),
                    namespace: Some(self.ns().to_string()),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SelfSubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| RequestError::new("create", "SelfSubjectAccessReview", "", "", e))?;
        let status = answer.status.unwrap_or_default();
        Ok((!status.allowed).then(|| status.reason.unwrap_or_default()))
    }

    /// The revision the Agent's route points at (`None`: no route, or
    /// private routing not configured).
    pub async fn active_revision(&self, agent: &str) -> Result<Option<i64>> {
        objects::validate_names(agent, 0)?;
        let Some((routes, _)) = self.routes()? else {
            return Ok(None);
        };
        if !self.namespace_exists().await? {
            return Ok(None);
        }
        let name = objects::names(agent).route;
        let route = match routes.get_opt(&name).await {
            Ok(r) => r,
            // The route API is not served: no route can exist.
            Err(e) if is_not_found(&e) => None,
            Err(e) => {
                return Err(RequestError::new("get", ROUTE_KIND, self.ns(), &name, e).into());
            }
        };
        match route {
            Some(r) => Ok(objects::routed_revision(agent, &objects::route_spec(&r)?)),
            None => Ok(None),
        }
    }

    /// Switches the Agent's route to `revision`. Before anything changes it
    /// checks the route API and the hub's route permissions
    /// ([`Gateways::check_routing`]), that the revision is prepared and ready
    /// and owned by `tenant`; any failure leaves the route unchanged.
    pub async fn activate(&self, tenant: &str, agent: &str, revision: i64) -> Result<Activation> {
        objects::validate_names(agent, revision)?;
        let Some((routes, routing)) = self.routes()? else {
            return Ok(Activation::RoutingDisabled);
        };
        self.check_routing().await?;
        let svc_name = objects::service_name(agent, revision);
        let svc = self
            .api::<Service>()
            .get_opt(&svc_name)
            .await
            .map_err(|e| RequestError::new("get", "Service", self.ns(), &svc_name, e))?
            .ok_or_else(|| Error::NotPrepared {
                agent: agent.to_string(),
                revision,
                service: svc_name.clone(),
            })?;
        let tenant = tenant.to_string();
        let owner = label_of(&svc.metadata, labels::TENANT).unwrap_or_default();
        if owner != tenant {
            return Err(Error::OwnedByOtherTenant {
                kind: "Service",
                name: svc_name,
                owner: owner.to_string(),
                tenant,
            });
        }
        if let Readiness::NotReady(why) = self.is_ready(agent, revision).await? {
            return Err(Error::NotReady {
                agent: agent.to_string(),
                revision,
                reason: why.as_str(),
            });
        }
        let name = objects::names(agent).route;
        let current = routes
            .get_opt(&name)
            .await
            .map_err(|e| RequestError::new("get", ROUTE_KIND, self.ns(), &name, e))?;
        let previous = match &current {
            Some(r) => {
                let owner = label_of(&r.metadata, labels::TENANT).unwrap_or_default();
                if owner != tenant {
                    return Err(Error::OwnedByOtherTenant {
                        kind: ROUTE_KIND,
                        name,
                        owner: owner.to_string(),
                        tenant,
                    });
                }
                objects::routed_revision(agent, &objects::route_spec(r)?)
            }
            None => None,
        };
        let obj = objects::route(self.ns(), &tenant, agent, revision, &self.config, routing)?;
        routes
            .patch(&name, &apply_params(), &Patch::Apply(&obj))
            .await
            .map_err(|e| {
                self.forget_checks();
                RequestError::new("apply", ROUTE_KIND, self.ns(), &name, e)
            })?;
        tracing::info!(
            agent,
            revision,
            previous = ?previous,
            route = %name,
            "gateway.activated"
        );
        Ok(Activation::Routed {
            route: name,
            revision,
            previous,
        })
    }
}
