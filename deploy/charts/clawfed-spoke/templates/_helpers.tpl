{{/* The release's full name: the release name when it contains the chart name. */}}
{{- define "clawfed-spoke.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "clawfed-spoke.serviceAccountName" -}}
{{- default (include "clawfed-spoke.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "clawfed-spoke.tenantRole" -}}
{{- default (printf "%s-tenant" (include "clawfed-spoke.fullname" .)) .Values.rbac.tenantClusterRole -}}
{{- end -}}

{{- define "clawfed-spoke.identitySecret" -}}
{{- default (printf "%s-identity" (include "clawfed-spoke.fullname" .)) .Values.identity.secretName -}}
{{- end -}}

{{/* Selector labels. app.kubernetes.io/name=clawfed-spoke is also what the
Harness NetworkPolicies admit on the Harness port. */}}
{{- define "clawfed-spoke.selectorLabels" -}}
app.kubernetes.io/name: clawfed-spoke
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "clawfed-spoke.labels" -}}
{{ include "clawfed-spoke.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* repository@digest when a digest is set, else repository:tag. */}}
{{- define "clawfed-spoke.image" -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail "image.digest must be sha256:<64 lowercase hex>" -}}
{{- end -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "clawfed-spoke.provider" -}}
{{- if not (has .Values.provider (list "deployment" "crd")) -}}
{{- fail (printf "provider: %q is not one of deployment, crd" .Values.provider) -}}
{{- end -}}
{{- if and .Values.sandboxContainment (ne .Values.provider "crd") -}}
{{- fail "sandboxContainment: only provider crd declares containment" -}}
{{- end -}}
{{- .Values.provider -}}
{{- end -}}

{{/* The hub link addresses as the spoke's comma list (CLAWFED_HUB_URL):
`hub.urls`, or `hub.url`; each must be https://host:port (the rule of
clawfed_proto::link::address). */}}
{{- define "clawfed-spoke.hubUrls" -}}
{{- if and .Values.hub.url .Values.hub.urls -}}
{{- fail "hub.url and hub.urls: set one of them" -}}
{{- end -}}
{{- $urls := list -}}
{{- if .Values.hub.urls -}}
{{- range $i, $u := .Values.hub.urls -}}
{{- if not (regexMatch "^https://[^/,]+:[0-9]+/?$" (toString $u)) -}}
{{- fail (printf "hub.urls[%d]: %q must be https://host:port" $i (toString $u)) -}}
{{- end -}}
{{- $urls = append $urls (toString $u) -}}
{{- end -}}
{{- else -}}
{{- if not (regexMatch "^https://[^/,]+:[0-9]+/?$" (required "hub.url (or hub.urls) is required (https://host:port)" .Values.hub.url)) -}}
{{- fail (printf "hub.url: %q must be https://host:port" .Values.hub.url) -}}
{{- end -}}
{{- $urls = list .Values.hub.url -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}
