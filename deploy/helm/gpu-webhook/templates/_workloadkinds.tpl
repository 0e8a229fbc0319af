{{- /*
workloadKinds: the custom kinds a WorkloadKind rule document declares reach the webhook only
where its configuration routes them (docs/rules.md, "WorkloadKind"). Each entry adds, to the
validate.gpu-webhook.io webhook, a rule for the kind's CREATE and UPDATE and, with scale:
true, one for <plural>/scale UPDATE (as the built-in kinds' scale rules of
deploy/base/webhooks.yaml); and `get` on the kind to the server's ClusterRole, which reads
the workload a scale changes (and without which that scale is allowed with a warning).
*/ -}}

{{/* The extra rules of validate.gpu-webhook.io, as a JSON list. */}}
{{- define "gpu-webhook.workloadKindRules" -}}
{{- $rules := list -}}
{{- range .Values.workloadKinds -}}
{{- $versions := .versions | default (list "*") -}}
{{- $rules = append $rules (dict "apiGroups" (list .group) "apiVersions" $versions "resources" .resources "operations" (list "CREATE" "UPDATE") "scope" "Namespaced") -}}
{{- end -}}
{{- range .Values.workloadKinds -}}
{{- if .scale -}}
{{- $scales := list -}}
{{- range .resources }}{{ $scales = append $scales (printf "%s/scale" .) }}{{ end -}}
{{- $rules = append $rules (dict "apiGroups" (list .group) "apiVersions" (.versions | default (list "*")) "resources" $scales "operations" (list "UPDATE") "scope" "Namespaced") -}}
{{- end -}}
{{- end -}}
{{- toJson $rules -}}
{{- end -}}

{{/* The extra rules of the server's ClusterRole: get on each kind whose scale is routed. */}}
{{- define "gpu-webhook.workloadKindReads" -}}
{{- $rules := list -}}
{{- range .Values.workloadKinds -}}
{{- if .scale -}}
{{- $rules = append $rules (dict "apiGroups" (list .group) "resources" .resources "verbs" (list "get")) -}}
{{- end -}}
{{- end -}}
{{- toJson $rules -}}
{{- end -}}
