{{/* The release's resource name prefix. */}}
{{- define "memstream.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The worker groups, in order. */}}
{{- define "memstream.groups" -}}ingest store{{- end -}}

{{- define "memstream.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one group: (dict "root" $ "group" "ingest"). */}}
{{- define "memstream.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .group }}
{{- end -}}

{{/* The consumer group (faust app id) of workers running these stages, exactly as
     memstream.config.group_id: "<prefix>-memstream", plus "-" and the stages joined by "-" unless
     they are all of them, in order. (dict "root" $ "stages" (list ...)) */}}
{{- define "memstream.consumerGroup" -}}
{{- $base := printf "%s-memstream" .root.Values.topics.prefix -}}
{{- if eq (join "," .stages) "compress,segment,stm,extract,index,consolidate,query" -}}
{{- $base -}}
{{- else -}}
{{- printf "%s-%s" $base (join "-" .stages) -}}
{{- end -}}
{{- end -}}

{{/* Qdrant URL, required: the embedded store cannot be shared by replicas nor kept by a pod. */}}
{{- define "memstream.qdrantUrl" -}}
{{- required "qdrant.url is required: the URL of a Qdrant server, or every node of a Qdrant cluster comma-separated (--set qdrant.url=http://qdrant:6333). The embedded store locks its folder to one process and lives in the pod's emptyDir: it cannot be shared by replicas nor survive a restart" .Values.qdrant.url -}}
{{- end -}}

{{/* Name of the Secret holding a key ("qdrant" or "llm"), or "" when none is given. */}}
{{- define "memstream.secretName" -}}
{{- $v := index .root.Values .which -}}
{{- if $v.existingSecret -}}
{{- $v.existingSecret -}}
{{- else if $v.apiKey -}}
{{- printf "%s-%s" (include "memstream.fullname" .root) .which -}}
{{- end -}}
{{- end -}}

{{- define "memstream.secretKey" -}}
{{- $v := index .root.Values .which -}}
{{- if $v.existingSecret -}}{{ $v.existingSecretKey }}{{- else -}}api-key{{- end -}}
{{- end -}}

{{/* The most replicas of a group under KEDA: its maxReplicas, else the partition count. */}}
{{- define "memstream.maxReplicas" -}}
{{- $g := index .root.Values .group -}}
{{- if kindIs "invalid" $g.maxReplicas -}}{{ .root.Values.topics.partitions }}{{- else -}}{{ $g.maxReplicas }}{{- end -}}
{{- end -}}
