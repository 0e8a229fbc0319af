{{- /*
Checks on rules.files made at render time, so that `helm template` / `install` / `upgrade`
fail with one line naming the values key, rather than the pod failing when the server loads
the file. Only what Helm can check cheaply: each file parses as YAML, each document has
the rule files' apiVersion and a known kind, and each validate entry of a GPUPolicy names a
known check and no unknown field. The full schema is the server's (`gpu-webhook
rules lint` runs it before you install).
*/ -}}

{{/* The rule kinds: DOCUMENT_KINDS of webhook/engine/policy/schema.py (a test keeps them equal). */}}
{{- define "gpu-webhook.ruleKinds" -}}
GPUPolicy GPUSettings GPUNodePool WorkloadKind InstanceType GPUNamespacePolicy GPUPolicyException
{{- end -}}

{{/* Renamed kinds (RENAMED_KINDS of the same module): old=new. */}}
{{- define "gpu-webhook.renamedRuleKinds" -}}
NodePool=GPUNodePool
{{- end -}}

{{/* The kind closest to a misspelt one: the same letters in another case, the new name of a
renamed kind, or the kind sharing the longest common start with it when that start is more
than half of the longer name (GPUPolicie, GPUPolicies -> GPUPolicy); else "". */}}
{{- define "gpu-webhook.closestRuleKind" -}}
{{- $word := . -}}
{{- $best := "" -}}
{{- $bestLength := 0 -}}
{{- range (include "gpu-webhook.renamedRuleKinds" . | splitList " ") -}}
{{- $pair := splitList "=" . -}}
{{- if eq (lower (first $pair)) (lower $word) -}}{{- $best = last $pair -}}{{- $bestLength = 1000 -}}{{- end -}}
{{- end -}}
{{- range (include "gpu-webhook.ruleKinds" . | splitList " ") -}}
{{- $kind := . -}}
{{- if eq (lower $kind) (lower $word) -}}
{{- $best = $kind -}}{{- $bestLength = 1000 -}}
{{- else -}}
{{- $shared := 0 -}}
{{- $stop := false -}}
{{- range $i := until (min (len $kind) (len $word) | int) -}}
{{- if and (not $stop) (eq (substr $i (add1 $i | int) $kind) (substr $i (add1 $i | int) $word)) -}}
{{- $shared = add1 $shared -}}
{{- else -}}
{{- $stop = true -}}
{{- end -}}
{{- end -}}
{{- if and (gt (mul 2 $shared | int) (max (len $kind) (len $word) | int)) (gt $shared $bestLength) -}}
{{- $best = $kind -}}{{- $bestLength = $shared -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $best -}}
{{- end -}}

{{/* fail with one line for the first document of one rules.files entry that is not a rule
document; the argument is (list name text). Documents are numbered from 1, empty ones (a
file of comments only, which turns a shipped default off) not counted. */}}
{{- define "gpu-webhook.checkRuleFile" -}}
{{- $name := index . 0 -}}
{{- $key := printf "rules.files[%s]" ($name | quote) -}}
{{- $kinds := include "gpu-webhook.ruleKinds" . | splitList " " -}}
{{- $number := 0 -}}
{{- range (regexSplit "(?m)^---[ \\t]*$" (index . 1) -1) -}}
{{- if regexMatch "(?m)^[ \\t]*[^#\\s]" . -}}
{{- $number = add1 $number -}}
{{- $doc := fromYaml . -}}
{{- if and (hasKey $doc "Error") (eq (len $doc) 1) -}}
{{- fail (printf "%s: document %d is not a YAML map: %s" $key $number (get $doc "Error" | replace "\n" " ")) -}}
{{- end -}}
{{- $apiVersion := get $doc "apiVersion" | toString -}}
{{- if ne $apiVersion "gpu-webhook.io/v1alpha1" -}}
{{- $has := ternary (printf "has apiVersion %s" ($apiVersion | quote)) "has no apiVersion" (ne $apiVersion "") -}}
{{- fail (printf "%s: document %d %s; rule documents are gpu-webhook.io/v1alpha1" $key $number $has) -}}
{{- end -}}
{{- $kind := get $doc "kind" | toString -}}
{{- if not (has $kind $kinds) -}}
{{- $closest := include "gpu-webhook.closestRuleKind" $kind -}}
{{- $hint := ternary (printf "did you mean %s?" $closest) (printf "the kinds: %s" (join ", " $kinds)) (ne $closest "") -}}
{{- $has := ternary (printf "has kind %s" $kind) "has no kind" (ne $kind "") -}}
{{- fail (printf "%s: document %d %s; %s" $key $number $has $hint) -}}
{{- end -}}
{{- if or (eq $kind "GPUPolicy") (eq $kind "GPUNamespacePolicy") -}}{{- include "gpu-webhook.checkValidateEntries" (list $key $number $doc) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The checks of a GPUPolicy's validate entries: the required key of each entry of
spec.validate in webhook/engine/policy/schema.py (a test keeps them equal). */}}
{{- define "gpu-webhook.ruleChecks" -}}
maxGPUsPerPod maxGPUsPerContainer allowedGPUCounts allowedProducts maxSharedGPUs requiredLabels forbiddenResources wholeGPUsOnly minGPUMemory maxGPUsPerWorkload requireProbes allowedPriorityClasses
{{- end -}}

{{/* fail with one line for the first validate entry of a GPUPolicy that names no check, or
holds a key that is neither a check nor action/message: the commonest typo
(maxGPUsPerPods), which the server would refuse at load, so the pod, not the release,
would fail. The argument is (list key number document). */}}
{{- define "gpu-webhook.checkValidateEntries" -}}
{{- $key := index . 0 -}}
{{- $number := index . 1 -}}
{{- $spec := get (index . 2) "spec" -}}
{{- $checks := include "gpu-webhook.ruleChecks" . | splitList " " -}}
{{- $validate := list -}}
{{- if kindIs "map" $spec -}}{{- $validate = get $spec "validate" -}}{{- end -}}
{{- if kindIs "slice" $validate -}}
{{- range $i, $entry := $validate -}}
{{- if kindIs "map" $entry -}}
{{- $where := printf "%s: document %d: spec.validate[%d]" $key $number $i -}}
{{- range $field := keys $entry | sortAlpha -}}
{{- if not (or (has $field $checks) (has $field (list "action" "message"))) -}}
{{- fail (printf "%s: unknown field %s; the checks: %s" $where $field (join ", " $checks)) -}}
{{- end -}}
{{- end -}}
{{- if not (len (without (keys $entry) "action" "message")) -}}
{{- fail (printf "%s: no check in this entry; the checks: %s" $where (join ", " $checks)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
