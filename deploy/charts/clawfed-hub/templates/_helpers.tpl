{{/* The release's full name: the release name when it contains the chart name. */}}
{{- define "clawfed-hub.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "clawfed-hub.serviceAccountName" -}}
{{- default (include "clawfed-hub.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Selector labels: also the hub peer the Gateways' NetworkPolicies admit. */}}
{{- define "clawfed-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "clawfed-hub.labels" -}}
{{ include "clawfed-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* repository@digest when a digest is set, else repository:tag. */}}
{{- define "clawfed-hub.image" -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail "image.digest must be sha256:<64 lowercase hex>" -}}
{{- end -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The volume of database.caSecret (PostgreSQL's CA), when set. */}}
{{- define "clawfed-hub.databaseCaVolume" -}}
{{- if .Values.database.caSecret -}}
- name: database-ca
  secret:
    secretName: {{ .Values.database.caSecret }}
    items:
      - { key: ca.crt, path: ca.crt }
{{- end -}}
{{- end -}}

{{/* The hub config file (hub.yaml). Secrets stay out of it. */}}
{{- define "clawfed-hub.config" -}}
{{- $full := include "clawfed-hub.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $svcNames := list -}}
{{- range $svc := list (printf "%s-link" $full) (printf "%s-tunnel" $full) -}}
{{- $svcNames = concat $svcNames (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) -}}
{{- end -}}
{{- $advertise := default (printf "https://%s-tunnel.%s.svc:%v" $full $ns .Values.tunnel.port) .Values.tunnel.advertiseUrl -}}
{{- $hubPeer := dict "namespace" $ns "podLabels" (include "clawfed-hub.selectorLabels" . | fromYaml) "port" (int .Values.tunnel.port) -}}
{{- $hubAccount := dict "namespace" $ns "name" (include "clawfed-hub.serviceAccountName" .) -}}
{{- $gwOptions := mergeOverwrite (deepCopy .Values.gateway.options) (dict "runtimeClusterRole" (printf "%s-gateway-runtime" $full) "serviceAccount" $hubAccount "hub" $hubPeer) -}}
{{- $cfg := dict "version" 1
  "api" (dict "restAddr" (printf "0.0.0.0:%v" .Values.api.restPort) "grpcAddr" (printf "0.0.0.0:%v" .Values.api.grpcPort) "metricsAddr" (printf "0.0.0.0:%v" .Values.metrics.port) "maxBodyBytes" (int .Values.api.maxBodyBytes))
  "link" (dict "enabled" true "addr" (printf "0.0.0.0:%v" .Values.link.port) "caDir" "/etc/clawfed/ca" "serverNames" (concat $svcNames .Values.link.serverNames | uniq) "certTtlSeconds" (int .Values.link.certTtlSeconds) "heartbeatSeconds" (int .Values.link.heartbeatSeconds) "maxSessions" (int .Values.link.maxSessions) "balanceIntervalSeconds" (int .Values.link.balance.intervalSeconds) "balanceSlack" (int .Values.link.balance.slack) "balanceMaxMoves" (int .Values.link.balance.maxMoves))
  "tunnel" (dict "enabled" .Values.tunnel.enabled "addr" (printf "0.0.0.0:%v" .Values.tunnel.port) "advertiseUrl" $advertise "serverNames" $svcNames)
  "gateway" (dict "enabled" .Values.gateway.enabled "options" $gwOptions)
  "secrets" (dict "keyFile" "/etc/clawfed/secrets/key")
-}}
{{- $api := get $cfg "api" -}}
{{- with .Values.api.rateLimit -}}
{{- $_ := set $api "rateLimit" . -}}
{{- end -}}
{{- if .Values.api.tls.secretName -}}
{{- if .Values.api.insecure -}}
{{- fail "api.insecure contradicts api.tls.secretName: the API serves TLS; remove one of them" -}}
{{- end -}}
{{- $tls := dict "certFile" "/etc/clawfed/api-tls/tls.crt" "keyFile" "/etc/clawfed/api-tls/tls.key" -}}
{{- if .Values.api.tls.clientCaSecret -}}
{{- $_ := set $tls "clientCaFile" "/etc/clawfed/api-client-ca/ca.crt" -}}
{{- end -}}
{{- $_ := set $api "tls" $tls -}}
{{- else if .Values.api.insecure -}}
{{- if .Values.api.tls.clientCaSecret -}}
{{- fail "api.tls.clientCaSecret needs api.tls.secretName (client certificates are only asked for over TLS)" -}}
{{- end -}}
{{- $_ := set $api "insecure" true -}}
{{- else -}}
{{- fail "api.tls.secretName is required (a kubernetes.io/tls Secret for the admin API), or set api.insecure=true for plain HTTP" -}}
{{- end -}}
{{- if .Values.database.maxConnections -}}
{{- $_ := set $cfg "database" (dict "maxConnections" (int .Values.database.maxConnections)) -}}
{{- end -}}
{{- $cfg = mergeOverwrite $cfg (deepCopy .Values.config) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* This replica's advertised link address (CLAWFED_LINK_ADVERTISE_URL), or
empty: see link.advertiseUrl in values.yaml. */}}
{{- define "clawfed-hub.linkAdvertiseUrl" -}}
{{- $v := toString .Values.link.advertiseUrl -}}
{{- if eq $v "auto" -}}
{{- if gt (int .Values.replicas) 1 -}}
{{- printf "https://$(POD_IP):%v" .Values.link.port -}}
{{- end -}}
{{- else if $v -}}
{{- if not (regexMatch "^https://[^/,]+:[0-9]+/?$" $v) -}}
{{- fail (printf "link.advertiseUrl: %q must be auto, empty or https://host:port" $v) -}}
{{- end -}}
{{- $v -}}
{{- end -}}
{{- end -}}
