{{/*
The chart's name, cut to 63 characters.
*/}}
{{- define "eventhub-consumer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's object name prefix, cut to 63 characters; a release whose name contains the
chart's name is not repeated.
*/}}
{{- define "eventhub-consumer.fullname" -}}
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
The version label: the image tag (else the app version) as a label value takes it, at most 63
characters that start and end with a letter or digit. A tag may start with '_' and end with '.',
'_' or '-' ("1.0_"), which the API server refuses in a label.
*/}}
{{- define "eventhub-consumer.version" -}}
{{- regexReplaceAll "^[^A-Za-z0-9]+|[^A-Za-z0-9]+$" (.Values.image.tag | default .Chart.AppVersion | trunc 63) "" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "eventhub-consumer.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "eventhub-consumer.selectorLabels" . }}
app.kubernetes.io/version: {{ include "eventhub-consumer.version" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: eventhub-balancer
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels on the consumer pods: those of every object but the chart's version. A label in the pod
template that changes with the chart alone would roll every pod on a chart upgrade that
changes nothing they run, and move every partition once.
*/}}
{{- define "eventhub-consumer.podLabels" -}}
{{ include "eventhub-consumer.selectorLabels" . }}
app.kubernetes.io/version: {{ include "eventhub-consumer.version" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: eventhub-balancer
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels that select the consumer pods (the EventHubConsumer's selector, the PDB's): stable
across upgrades.
*/}}
{{- define "eventhub-consumer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eventhub-consumer.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: consumer
{{- end }}

{{/*
The EventHubConsumer's name (EHB_CONSUMER in the pods).
*/}}
{{- define "eventhub-consumer.consumerName" -}}
{{- default (include "eventhub-consumer.fullname" .) .Values.consumer.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The ServiceAccount the pods run as.
*/}}
{{- define "eventhub-consumer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "eventhub-consumer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference: repository@digest, or repository:tag (the appVersion by default).
*/}}
{{- define "eventhub-consumer.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
--shutdown-timeout: a release of every partition (release + handler exit) and 5 s to write
the final checkpoints and the acknowledgement.
*/}}
{{- define "eventhub-consumer.shutdownSeconds" -}}
{{- add .Values.timeouts.releaseSeconds .Values.timeouts.handlerExitSeconds 5 }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the shutdown and a margin, so that Kubernetes never kills a pod
that is still releasing.
*/}}
{{- define "eventhub-consumer.gracePeriodSeconds" -}}
{{- add (include "eventhub-consumer.shutdownSeconds" . | int) .Values.timeouts.marginSeconds }}
{{- end }}

{{/*
spec.balancing.handoffTimeoutSeconds: the operator waits for an acknowledgement at least as
long as a pod may take to release (release + handler exit), plus the margin.
*/}}
{{- define "eventhub-consumer.handoffSeconds" -}}
{{- $floor := add .Values.timeouts.releaseSeconds .Values.timeouts.handlerExitSeconds }}
{{- if hasKey .Values.consumer.balancing "handoffTimeoutSeconds" }}
{{- $given := int .Values.consumer.balancing.handoffTimeoutSeconds }}
{{- if le $given (int $floor) }}
{{- fail (printf "consumer.balancing.handoffTimeoutSeconds (%d) must exceed timeouts.releaseSeconds + timeouts.handlerExitSeconds (%d): the operator would give partitions to their next owner while the old one may still process them; raise it or drop it to have it derived" $given (int $floor)) }}
{{- end }}
{{- $given }}
{{- else }}
{{- add $floor .Values.timeouts.marginSeconds }}
{{- end }}
{{- end }}
