{{/*
The chart's name, cut to 63 characters (the DNS label limit some name fields have).
*/}}
{{- define "eventhub-balancer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A fully qualified name for the release's objects, cut to 63 characters. A release whose name
already contains the chart's name is not repeated ("eventhub-balancer", not
"eventhub-balancer-eventhub-balancer").
*/}}
{{- define "eventhub-balancer.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The chart label: name and version, cut to 63 characters.
*/}}
{{- define "eventhub-balancer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The version label: the image tag (else the app version) as a label value takes it, at most 63
characters that start and end with a letter or digit. A tag may start with '_' and end with '.',
'_' or '-' ("1.0_"), which the API server refuses in a label.
*/}}
{{- define "eventhub-balancer.version" -}}
{{- regexReplaceAll "^[^A-Za-z0-9]+|[^A-Za-z0-9]+$" (.Values.image.tag | default .Chart.AppVersion | trunc 63) "" }}
{{- end }}

{{/*
Refuses a label the user adds (commonLabels, podLabels) that the chart selects its pods by, or
that is no label key: with app.kubernetes.io/instance in commonLabels the Deployment's selector
matched none of its pods, and the install failed half applied ("`selector` does not match
template `labels`"). Called with (list $ "commonLabels"); renders nothing.
*/}}
{{- define "eventhub-balancer.checkLabels" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $selecting := include "eventhub-balancer.selectorLabels" $root | fromYaml }}
{{- range $name, $_ := index $root.Values $key }}
{{- if hasKey $selecting $name }}
{{- fail (printf "%s sets %s, a label the chart selects its pods by (the Deployment's selector): remove it%s" $key $name (ternary " (nameOverride sets it)" "" (eq $name "app.kubernetes.io/name"))) }}
{{- end }}
{{- if or (not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$" $name)) (gt (len (first (splitList "/" $name))) 253) }}
{{- fail (printf "%s: %q is not a label key: use at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit, after an optional DNS prefix of at most 253 characters and '/' (example.com/team)" $key $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The chart's labels that select nothing, under the user's: (list $ before after) renders
before, then commonLabels, then after, then the chart's version, managed-by and part-of, each
key once, from the first that has it (a key given twice is a mapping YAML 1.2 forbids).
*/}}
{{- define "eventhub-balancer.ownLabels" -}}
{{- $root := index . 0 }}
{{- $own := dict "app.kubernetes.io/version" (include "eventhub-balancer.version" $root) "app.kubernetes.io/managed-by" $root.Release.Service "app.kubernetes.io/part-of" "eventhub-balancer" }}
{{- toYaml (merge (dict) (index . 1) (default (dict) $root.Values.commonLabels) (index . 2) $own) }}
{{- end }}

{{/*
Labels on every object: the selector's, then commonLabels over the chart's own.
*/}}
{{- define "eventhub-balancer.labels" -}}
{{- include "eventhub-balancer.checkLabels" (list . "commonLabels") }}
{{ include "eventhub-balancer.selectorLabels" . }}
{{ include "eventhub-balancer.ownLabels" (list . (dict) (dict "helm.sh/chart" (include "eventhub-balancer.chart" .))) }}
{{- end }}

{{/*
Labels on the operator's pod: those of every object, with podLabels over them.
*/}}
{{- define "eventhub-balancer.podLabels" -}}
{{- include "eventhub-balancer.checkLabels" (list . "commonLabels") }}
{{- include "eventhub-balancer.checkLabels" (list . "podLabels") }}
{{ include "eventhub-balancer.selectorLabels" . }}
{{ include "eventhub-balancer.ownLabels" (list . (default (dict) .Values.podLabels) (dict "helm.sh/chart" (include "eventhub-balancer.chart" .))) }}
{{- end }}

{{/*
Labels that select the operator's pods: stable across upgrades.
*/}}
{{- define "eventhub-balancer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eventhub-balancer.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
The ServiceAccount the operator runs as.
*/}}
{{- define "eventhub-balancer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "eventhub-balancer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image: a digest wins over a tag; the tag defaults to the chart's appVersion.
*/}}
{{- define "eventhub-balancer.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The kopf peering object's name.
*/}}
{{- define "eventhub-balancer.peeringName" -}}
{{- default (include "eventhub-balancer.fullname" .) .Values.peering.name }}
{{- end }}

{{/*
The namespace-scoped rules the operator needs where it serves EventHubConsumers; the same list
goes into the ClusterRole (cluster-wide) or into one Role per watched namespace.
*/}}
{{- define "eventhub-balancer.namespacedRules" -}}
# The custom resource: handlers, kopf's finalizer and progress annotations, and the status.
- apiGroups: [eventhub-balancer.dev]
  resources: [eventhubconsumers]
  verbs: [get, list, watch, patch]
- apiGroups: [eventhub-balancer.dev]
  resources: [eventhubconsumers/status]
  verbs: [patch]
# Liveness comes from the pods; with annotatePods the operator also annotates each pod with
# its partitions (patch on pods also allows changing images: off by default).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch{{ if .Values.annotatePods }}, patch{{ end }}]
# One assignment ConfigMap per (EventHubConsumer, pod): written by patch, stale ones deleted,
# one read again by name when a write of it conflicted (a pod's acknowledgement meanwhile).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
# Kubernetes Events with specific reasons (PartitionAssigned, HandoffTimedOut, ...).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/*
What the operator needs in a tenant's namespace, bound there only (eventhub-balancer.tenantNamespaces):
the connection strings its EventHubConsumers name (read by name, never listed or watched), and
for spec.serviceAccountName the ServiceAccount's client-id annotation (read by name) and a
short-lived token of it (audience api://AzureADTokenExchange, which only Microsoft Entra ID
accepts; the admission policies narrow it further).
*/}}
{{- define "eventhub-balancer.tenantRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get]
- apiGroups: [""]
  resources: [serviceaccounts/token]
  verbs: [create]
{{- end }}

{{/*
The namespaces that opted in to the tenant rules: tenantNamespaces, else (namespaced install)
the watched namespaces. Cluster-wide with no tenantNamespaces: none.
*/}}
{{- define "eventhub-balancer.tenantNamespaces" -}}
{{- toJson (.Values.tenantNamespaces | default .Values.watchNamespaces) }}
{{- end }}

{{/*
The metrics Service's name: the full name cut so that the suffix still fits in 63 characters.
*/}}
{{- define "eventhub-balancer.metricsServiceName" -}}
{{- printf "%s-metrics" (include "eventhub-balancer.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/*
"true" when the cluster serves ValidatingAdmissionPolicy as admissionregistration.k8s.io/v1
(GA in 1.30), else empty. `helm install` sees the cluster's API; `helm template` sees only
--kube-version and --api-versions. The chart installs from 1.27 on (Chart.yaml kubeVersion),
so on 1.27-1.29 the policy is left out instead of failing the install.
*/}}
{{- define "eventhub-balancer.admissionPolicySupported" -}}
{{- if or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end }}
{{- end }}
