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
The chart label: name and version, cut to 63 characters.
*/}}
{{- define "eventhub-consumer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Refuses a label the user adds (commonLabels, podLabels) that the chart selects its pods by, or
that is no label key: with app.kubernetes.io/instance in commonLabels the Deployment's selector
matched none of its pods, and the install failed half applied ("`selector` does not match
template `labels`"). Called with (list $ "commonLabels"); renders nothing.
*/}}
{{- define "eventhub-consumer.checkLabels" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $selecting := include "eventhub-consumer.selectorLabels" $root | fromYaml }}
{{- range $name, $_ := index $root.Values $key }}
{{- if hasKey $selecting $name }}
{{- fail (printf "%s sets %s, a label the chart selects its pods by (the Deployment's selector and the EventHubConsumer's): remove it%s" $key $name (ternary " (nameOverride sets it)" "" (eq $name "app.kubernetes.io/name"))) }}
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
{{- define "eventhub-consumer.ownLabels" -}}
{{- $root := index . 0 }}
{{- $own := dict "app.kubernetes.io/version" (include "eventhub-consumer.version" $root) "app.kubernetes.io/managed-by" $root.Release.Service "app.kubernetes.io/part-of" "eventhub-balancer" }}
{{- toYaml (merge (dict) (index . 1) (default (dict) $root.Values.commonLabels) (index . 2) $own) }}
{{- end }}

{{/*
Labels on every object: the selector's, then commonLabels over the chart's own.
*/}}
{{- define "eventhub-consumer.labels" -}}
{{- include "eventhub-consumer.checkLabels" (list . "commonLabels") }}
{{ include "eventhub-consumer.selectorLabels" . }}
{{ include "eventhub-consumer.ownLabels" (list . (dict) (dict "helm.sh/chart" (include "eventhub-consumer.chart" .))) }}
{{- end }}

{{/*
Labels on the consumer pods: those of every object but the chart's version, with podLabels
over them, and workload identity's when it is on. A label in the pod template that changes
with the chart alone would roll every pod on a chart upgrade that changes nothing they run,
and move every partition once.
*/}}
{{- define "eventhub-consumer.podLabels" -}}
{{- include "eventhub-consumer.checkLabels" (list . "commonLabels") }}
{{- include "eventhub-consumer.checkLabels" (list . "podLabels") }}
{{ include "eventhub-consumer.selectorLabels" . }}
{{ include "eventhub-consumer.ownLabels" (list . (merge (dict) (ternary (dict "azure.workload.identity/use" "true") (dict) (not (empty .Values.workloadIdentity.clientId))) (default (dict) .Values.podLabels)) (dict)) }}
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

{{/*
consumer.eventHub.fullyQualifiedNamespace, consumer.checkpointStore.accountUrl and
consumer.checkpointStore.containerName, checked as the CRD's rules check them and in their
words: the API server would refuse the EventHubConsumer only after the Secrets, the Role and
the Deployment were applied. The values schema has no pattern for them, as its refusal could
only show the pattern. A host is DNS labels, none empty and none starting or ending with '-';
a port, 1 to 65535 (the CRD's rules hold the same patterns).
*/}}
{{- define "eventhub-consumer.hostPattern" -}}
[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*
{{- end }}

{{- define "eventhub-consumer.portPattern" -}}
0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])
{{- end }}

{{- define "eventhub-consumer.eventHubHost" -}}
{{- $hostPattern := include "eventhub-consumer.hostPattern" . -}}
{{- $portPattern := include "eventhub-consumer.portPattern" . -}}
{{- $host := required "consumer.eventHub.fullyQualifiedNamespace is required: your Event Hubs namespace's host (--set consumer.eventHub.fullyQualifiedNamespace=<namespace>.servicebus.windows.net)" . -}}
{{- if regexMatch "[/;=]" $host -}}
{{- /* Not repeated: a connection string holds its key, and a GitOps tool shows the error. */ -}}
{{- fail "consumer.eventHub.fullyQualifiedNamespace is a URL or a connection string: give the namespace's host alone, like shop.servicebus.windows.net (in a connection string, the host between Endpoint=sb:// and the next /)" -}}
{{- else if not (regexMatch (printf "^%s(:[0-9]{1,5})?$" $hostPattern) $host) -}}
{{- fail (printf "consumer.eventHub.fullyQualifiedNamespace %q is not a host: give the Event Hubs namespace's host, like shop.servicebus.windows.net, or host:port of a local emulator (labels of letters, digits and '-' joined by dots, none starting or ending with '-')" $host) -}}
{{- else if and (regexMatch ":[0-9]+$" $host) (not (regexMatch (printf ":%s$" $portPattern) $host)) -}}
{{- fail (printf "consumer.eventHub.fullyQualifiedNamespace %q has a port outside 1-65535: give the host alone (like shop.servicebus.windows.net), or host:port with a port from 1 to 65535" $host) -}}
{{- end -}}
{{- $host -}}
{{- end }}

{{- define "eventhub-consumer.blobEndpoint" -}}
{{- $hostPattern := include "eventhub-consumer.hostPattern" . -}}
{{- $portPattern := include "eventhub-consumer.portPattern" . -}}
{{- $url := . -}}
{{- $field := "consumer.checkpointStore.accountUrl" -}}
{{- if regexMatch "[;=]" $url -}}
{{- /* Not repeated: a connection string holds its key, and a GitOps tool shows the error. */ -}}
{{- fail (printf "%s is a connection string: give the account's blob endpoint alone, like https://shop.blob.core.windows.net, or name the connection string's Secret in %s" $field "consumer.checkpointStore.credentials.connectionStringSecretRef") -}}
{{- else if not (hasPrefix "https://" $url) -}}
{{- fail (printf "%s %q must start with https://: give https://<account>.blob.core.windows.net (the pods send a token to it, over TLS only)" $field $url) -}}
{{- else if regexMatch "^https://[^/]*/." $url -}}
{{- fail (printf "%s %q holds a path: give the account's endpoint alone, like https://shop.blob.core.windows.net, and the container in consumer.checkpointStore.containerName" $field $url) -}}
{{- else if not (regexMatch (printf "^https://%s(:[0-9]{1,5})?/?$" $hostPattern) $url) -}}
{{- fail (printf "%s %q is not a blob endpoint: give https:// and the storage account's host, like https://shop.blob.core.windows.net (labels of letters, digits and '-' joined by dots, none starting or ending with '-')" $field $url) -}}
{{- else if and (regexMatch ":[0-9]+/?$" $url) (not (regexMatch (printf ":%s/?$" $portPattern) $url)) -}}
{{- fail (printf "%s %q has a port outside 1-65535: give https://<account>.blob.core.windows.net without a port, or a port from 1 to 65535" $field $url) -}}
{{- end -}}
{{- $url -}}
{{- end }}

{{- define "eventhub-consumer.containerName" -}}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]*[a-z0-9]$" .) -}}
{{- fail (printf "consumer.checkpointStore.containerName %q is not a blob container name: use lower-case letters, digits and dashes, starting and ending with a letter or digit (like orders-checkpoints)" .) -}}
{{- else if contains "--" . -}}
{{- fail (printf "consumer.checkpointStore.containerName %q must not hold two dashes in a row (Blob Storage refuses such a container): use single dashes" .) -}}
{{- end -}}
{{- . -}}
{{- end }}
