{{/* The name every object shares: gpu-webhook for a release of that name. */}}
{{- define "gpu-webhook.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpu-webhook.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-admission-webhook
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpu-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "gpu-webhook.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "gpu-webhook.tlsSecret" -}}
{{- if eq .Values.certs.mode "secret" -}}
{{ .Values.certs.secret.name }}
{{- else -}}
{{ include "gpu-webhook.fullname" . }}-tls
{{- end -}}
{{- end -}}

{{- define "gpu-webhook.rulesConfigMap" -}}
{{- .Values.rules.existingConfigMap | default (printf "%s-rules" (include "gpu-webhook.fullname" .)) -}}
{{- end -}}

{{- define "gpu-webhook.priorityClassName" -}}
{{- .Values.priorityClass.name -}}
{{- end -}}

{{/* The documents of a copied multi-document file, parsed. */}}
{{- define "gpu-webhook.documents" -}}
{{- $docs := list -}}
{{- range (regexSplit "(?m)^---\\s*$" . -1) -}}
{{- $doc := fromYaml . -}}
{{- if $doc -}}{{- $docs = append $docs $doc -}}{{- end -}}
{{- end -}}
{{- toJson $docs -}}
{{- end -}}

{{/* A ServiceAccount subject of the copied RBAC moved to this release. */}}
{{- define "gpu-webhook.subjects" -}}
{{- $root := index . 0 -}}
{{- $subjects := list -}}
{{- range (index . 1) -}}
{{- $subjects = append $subjects (dict "kind" .kind "name" (replace "gpu-webhook" (include "gpu-webhook.fullname" $root) .name) "namespace" $root.Release.Namespace) -}}
{{- end -}}
{{- toYaml $subjects -}}
{{- end -}}
