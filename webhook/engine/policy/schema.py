"""The JSON Schema of rule files: the one source for validation, editors and docs.

``gpu-webhook rules schema`` prints it; ``schema/rules.schema.json`` is that output,
shipped so editors validate rule files (a test keeps the two equal).
"""

from __future__ import annotations

from typing import Any

API_VERSION = "gpu-webhook.io/v1alpha1"
ACTIONS = ["deny", "warn", "audit"]
PROBES = ("liveness", "readiness", "startup")
# What a GPUPolicy's ``exempt`` may name: built-in checks and mutations of GPU access control.
EXEMPTIONS = [
    "gpuAccessWithoutRequest",
    "nonGPUPodOnGPUNode",
    "hideGPUs",
    "avoidGPUNodes",
    # Issue 26: the CUDA driver check and its node affinity.
    "cudaDriver",
    "cudaAffinity",
]
_DNS_SUBDOMAIN = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
}

_STR_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1}}
_QUANTITY: dict[str, Any] = {
    "description": "A Kubernetes quantity such as 16Gi or 512Mi.",
    "anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 0}],
}
_ACTION = {
    "enum": ACTIONS,
    "description": "deny: reject; warn: allow with a warning; audit: record",
}


# Rules across fields, for the CRDs (webhook.engine.policy.crds): CEL the API server runs
# (x-kubernetes-validations), also while the webhook is down, in the words rules lint uses
# for the same problem (webhook.engine.policy.ruleset). JSON Schema ignores the keyword.
CEL = "x-kubernetes-validations"


def _obj(
    properties: dict[str, Any],
    *,
    required: list[str] | None = None,
    cel: list[dict[str, str]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    if cel:
        schema[CEL] = cel
    schema.update(extra)
    return schema


_REQUIREMENT = _obj(
    {
        "key": {"type": "string", "minLength": 1},
        "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]},
        "values": _STR_LIST,
    },
    required=["key", "operator"],
)
_LABEL_SELECTOR = _obj(
    {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": _obj(
                {
                    "key": {"type": "string", "minLength": 1},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": _STR_LIST,
                },
                required=["key", "operator"],
            ),
        },
    }
)
# size() costs a constant where comparing a string without maxLength would cost the most a
# request can carry; an enum's length is its longest word (k8s.io/apiserver
# pkg/cel/common/schemas.go, estimateMaxStringEnumLength).
_TOLERATION = _obj(
    {
        "key": {"type": "string"},
        "operator": {"enum": ["Exists", "Equal"]},
        "value": {"type": "string"},
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
        "tolerationSeconds": {"type": "integer"},
    },
    cel=[
        {
            "rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value)"
            " || size(self.value) == 0",
            "message": "must be empty when operator is Exists",
            "fieldPath": ".value",
        },
        {
            "rule": "(has(self.key) && size(self.key) > 0) || "
            "(has(self.operator) && self.operator == 'Exists')",
            "message": "an empty key needs operator Exists",
            "fieldPath": ".operator",
        },
    ],
)
_TAINT = _obj(
    {
        "key": {"type": "string", "minLength": 1},
        "value": {"type": "string"},
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
    },
    required=["key", "effect"],
)
_METADATA = _obj(
    {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    required=["name"],
)


def _check(name: str, value: dict[str, Any], description: str) -> dict[str, Any]:
    return _obj(
        {
            name: {**value, "description": description},
            "action": _ACTION,
            "message": {"type": "string", "description": "Appended to the finding: how to fix."},
        },
        required=[name],
    )


_CHECKS = [
    _check("maxGPUsPerPod", {"type": "integer", "minimum": 0}, "At most this many GPUs per pod."),
    _check(
        "maxGPUsPerContainer", {"type": "integer", "minimum": 0}, "At most this many per container."
    ),
    _check(
        "allowedGPUCounts",
        {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
        "A GPU container must ask for one of these counts (e.g. 1, 2, 4, 8).",
    ),
    _check(
        "allowedProducts",
        {**_STR_LIST, "minItems": 1},
        "GPU products (nvidia.com/gpu.product globs) the pod may land on.",
    ),
    _check(
        "maxSharedGPUs",
        {"type": "integer", "minimum": 1},
        "At most this many units of a shared GPU resource per container (1: no more than one).",
    ),
    _check(
        "requiredLabels",
        {**_STR_LIST, "minItems": 1},
        "Pod label keys a GPU pod must carry (cost attribution, ownership).",
    ),
    _check(
        "forbiddenResources",
        {**_STR_LIST, "minItems": 1},
        "GPU resource name globs that matching pods may not request.",
    ),
    _check(
        "wholeGPUsOnly",
        {"type": "boolean"},
        "true: the pod may land only where its GPU resources are whole GPUs (no MIG slice, "
        "no time-sliced or MPS slot).",
    ),
    _check(
        "minGPUMemory",
        _QUANTITY,
        "Some node the pod can use must have GPUs with at least this much memory (e.g. 40Gi).",
    ),
    _check(
        "maxGPUsPerWorkload",
        {"type": "integer", "minimum": 0},
        "At most this many GPUs for all pods of a workload (replicas times GPUs per pod).",
    ),
    _check(
        "requireProbes",
        {
            "type": "array",
            "items": {"enum": list(PROBES)},
            "minItems": 1,
            "uniqueItems": True,
        },
        "Probes every GPU container of a Deployment, StatefulSet or LeaderWorkerSet must "
        "have: a hung GPU (driver hang, XID error) leaves a pod Running and useless.",
    ),
    _check(
        "allowedPriorityClasses",
        {**_STR_LIST, "minItems": 1},
        "PriorityClass names (globs) a GPU pod may use; a pod without one fails.",
    ),
]

_MATCH = _obj(
    {
        "namespaces": {**_STR_LIST, "description": "Namespace names or globs; default all."},
        "excludeNamespaces": _STR_LIST,
        "namespaceSelector": _LABEL_SELECTOR,
        "podSelector": _LABEL_SELECTOR,
        "resources": {
            **_STR_LIST,
            "description": "GPU resource globs; the pod must request one. Default: any GPU.",
        },
        "deviceClasses": {
            **_STR_LIST,
            "description": "DRA device class globs; the pod's claims must ask for one. With "
            "resources: either matches. Default: any GPU.",
        },
        "gpuCount": _obj(
            {"min": {"type": "integer", "minimum": 0}, "max": {"type": "integer", "minimum": 0}},
            description="Total GPUs the pod requests; default min 1 (GPU pods only).",
            cel=[
                {
                    "rule": "!has(self.min) || !has(self.max) || self.max >= self.min",
                    "message": "max is smaller than min",
                }
            ],
        ),
    }
)
_ENV_VAR = _obj(
    {
        "name": {"type": "string", "pattern": "^[-._a-zA-Z][-._a-zA-Z0-9]*$"},
        "value": {
            "type": "string",
            "description": "May use {gpuCount} and {gpuIndexes} (0,1,... inside the container).",
        },
        "override": {"type": "boolean", "description": "Replace a value the container sets."},
    },
    required=["name", "value"],
)
_MUTATE = _obj(
    {
        # maxItems: bounds the cost of the CRD's CEL rules on each toleration.
        "tolerations": {"type": "array", "items": _TOLERATION, "maxItems": 64},
        "nodeAffinity": _obj(
            {
                "required": {"type": "array", "items": _REQUIREMENT, "minItems": 1},
                "gpuMemory": _obj(
                    {"min": _QUANTITY},
                    required=["min"],
                    description="Shorthand: a required nvidia.com/gpu.memory Gt term (MiB).",
                ),
                "preferred": {
                    "type": "array",
                    "items": _obj(
                        {
                            "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                            "matchExpressions": {
                                "type": "array",
                                "items": _REQUIREMENT,
                                "minItems": 1,
                            },
                        },
                        required=["weight", "matchExpressions"],
                    ),
                },
            }
        ),
        "env": _obj(
            {
                "hideGPUsFromNonGPUContainers": {
                    "description": "NVIDIA_VISIBLE_DEVICES=void, CUDA_VISIBLE_DEVICES='' "
                    "in containers that ask for no GPU: gpuPods (or true) in GPU pods, "
                    "gpuNodes in every pod that can land on a GPU node.",
                    "anyOf": [{"type": "boolean"}, {"enum": ["gpuPods", "gpuNodes"]}],
                },
                "gpuContainers": {"type": "array", "items": _ENV_VAR},
            }
        ),
        "memoryLimit": _obj(
            {
                "fixed": _QUANTITY,
                "perGPU": {
                    **_QUANTITY,
                    "description": "Per physical GPU: a MIG slice or shared slot counts as "
                    "part of one GPU.",
                },
                "inventoryShare": {
                    "type": "boolean",
                    "description": "Per-GPU share of the smallest usable node's memory.",
                },
                "whenTooLarge": {
                    "enum": ["cap", "skip", "deny"],
                    "description": "When the limits (copied into unset requests) fit no node "
                    "the pod can use: cap them to fit (default, with a warning), skip them "
                    "(with a warning), or deny the pod.",
                },
            },
            oneOf=[{"required": [mode]} for mode in ("fixed", "perGPU", "inventoryShare")],
        ),
        "shm": _obj({"sizeLimit": _QUANTITY}, required=["sizeLimit"]),
        "runtimeClassName": {
            **_DNS_SUBDOMAIN,
            "description": "Set where the pod names no runtime class (a warning where it "
            "names another): for clusters whose default runtime is not NVIDIA's.",
        },
        "avoidGPUNodes": _obj(
            {
                "nodeLabel": {"type": "string", "minLength": 1},
                "value": {"type": "string"},
            },
            required=["nodeLabel"],
            description="Keep pods that ask for no GPU off nodes with this label (required "
            "node affinity: NotIn [value], or DoesNotExist without a value).",
        ),
    }
)
_GPU_POLICY = _obj(
    {
        "order": {"type": "integer", "description": "Lower runs first; ties by name."},
        "description": {"type": "string"},
        "match": _MATCH,
        "validate": {
            "type": "array",
            "items": {"oneOf": _CHECKS},
            # Bounds the CRD's CEL rule on each entry (webhook.engine.policy.crds): the API
            # server multiplies a rule's cost by the most entries it may run on.
            "maxItems": 64,
        },
        "mutate": _MUTATE,
        "exempt": {
            "type": "array",
            "items": {"enum": EXEMPTIONS},
            "uniqueItems": True,
            "minItems": 1,
            "description": "Built-in GPU access checks and mutations that pods this rule "
            "matches are spared (the match then covers pods with no GPU unless gpuCount "
            "says otherwise).",
        },
    }
)
BUILTIN_CHECKS = {
    "requestsWithoutLimits": "a GPU in requests but not in limits",
    "requestsNotEqualLimits": "GPU requests differ from limits",
    "invalidQuantity": "a GPU quantity that is not a number",
    "fractionalQuantity": "a GPU quantity that is not a whole number",
    "negativeQuantity": "a negative GPU quantity",
    "capacity": "more GPUs than the largest node the pod can use",
    "unknownResource": "a GPU resource, or a name close to one, that nothing offers",
    "clusterCapacity": "a workload needs more GPUs than the cluster has",
    "sharedGPURequest": "a container asks for more than one slot of a shared (time-sliced, MPS)"
    " GPU",
    "multipleMIGDevices": "a container asks for more than one MIG device",
    "deviceClaims": "DRA claims that no node the pod can use can meet",
    "unknownDeviceClass": "a DRA claim names a device class that does not exist",
    "missingClaim": "a pod refers to a ResourceClaim or template the webhook has not seen",
    "deviceSelector": "a DRA device selector the webhook cannot evaluate",
    "gpuAccessWithoutRequest": "a container that asks for no GPU but can reach GPUs",
    "nonGPUPodOnGPUNode": "a pod that asks for no GPU but can only (or freely) use GPU nodes",
    "unknownRuntimeClass": "a runtime class the cluster does not have (live inventory)",
    # Issue 26: what still fails after admission.
    "gangFit": "pods that must run together (training jobs, gangs) cannot all run at once",
    "cudaDriver": "no node the pod can use has a driver new enough for its container's CUDA",
    "gpuQuota": "a workload's pods together need more GPUs than its namespace's hard quota",
}
_GPU_TAINT = _obj(
    {
        "key": {"type": "string", "minLength": 1},
        "value": {"type": "string", "description": "Omit: any value."},
        "effect": {"enum": ["NoSchedule", "NoExecute"]},
    },
    required=["key"],
)
_NODE_LABEL = _obj(
    {
        "key": {"type": "string", "minLength": 1},
        "value": {"type": "string", "description": "Omit: any value."},
    },
    required=["key"],
)
_SETTINGS = _obj(
    {
        "gpuResources": {
            "type": "array",
            "description": "Resource names (globs) that count as GPUs. Replaces the default list.",
            "items": _obj(
                {"name": {"type": "string", "minLength": 1}, "shared": {"type": "boolean"}},
                required=["name"],
            ),
        },
        "checks": _obj(
            {
                name: {
                    "enum": [*ACTIONS, "repair"] if name == "requestsWithoutLimits" else ACTIONS,
                    "description": text,
                }
                for name, text in BUILTIN_CHECKS.items()
            }
        ),
        "gpuDeviceClasses": {
            **_STR_LIST,
            "description": "DRA device classes (globs) whose devices are GPUs. Replaces the "
            "default: gpu.nvidia.com, mig.nvidia.com. A class whose extendedResourceName is a "
            "GPU resource is a GPU class too.",
        },
        "inventoryFailureMode": {
            "enum": ["allow", "deny"],
            "description": "When the node inventory is unavailable: allow with a warning, or deny.",
        },
        "gpuNodes": _obj(
            {
                "taints": {
                    "type": "array",
                    "items": _GPU_TAINT,
                    "description": "Taints GPU nodes carry. Replaces the default list.",
                },
                "labels": {
                    "type": "array",
                    "items": _NODE_LABEL,
                    "description": "Labels only GPU nodes carry. Replaces the default list.",
                },
                "exemptDaemonSets": {
                    "type": "boolean",
                    "description": "DaemonSets (and pods pinned to a node by name) are "
                    "spared nonGPUPodOnGPUNode; default true.",
                },
            },
            description="How GPU nodes are recognised; with an inventory, nodes that offer "
            "a GPU resource are GPU nodes too.",
        ),
        # --- nodes that could exist (issue 23) ---
        "autoscaling": {
            # YAML 1.1 reads an unquoted off as false: taken as "off".
            "enum": ["detect", "declared", "off", False],
            "description": "detect (default): count live Karpenter NodePools (sized through "
            "the instance-type catalogue) and let detected autoscalers (cluster-autoscaler, "
            "GKE) stop capacity denials; declared: GPUNodePool rule documents only; off: "
            "today's nodes only.",
        },
        "systemReserved": _obj(
            {
                "memoryOverheadPercent": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 100,
                    "description": "Share of an instance's memory the hypervisor keeps "
                    "(Karpenter's --vm-memory-overhead-percent; AWS and Azure rows, GCP "
                    "rows use GKE's own reservation); default 7.5.",
                },
                "cpu": {
                    **_QUANTITY,
                    "description": "CPU a new node keeps back; default Karpenter's "
                    "kube-reserved formula.",
                },
                "memory": {
                    **_QUANTITY,
                    "description": "Memory a new node keeps back besides the overhead; "
                    "default 11Mi per pod + 255Mi + 100Mi eviction.",
                },
            },
            description="What a node an autoscaler creates keeps back from pods.",
        ),
        # --- issue 21: the device plugin's sharing rules, resources the scheduler ignores ---
        "devicePlugin": _obj(
            {
                "failRequestsGreaterThanOne": _obj(
                    {
                        "timeSlicing": {
                            "type": "boolean",
                            "description": "The device plugin's time-slicing config sets "
                            "failRequestsGreaterThanOne: true; default false, as the plugin.",
                        },
                        "mps": {
                            "type": "boolean",
                            "description": "The plugin refuses more than one MPS slot per "
                            "container; default true (always so before v0.20.0).",
                        },
                    },
                    description="Where the NVIDIA device plugin fails a container asking "
                    "for more than one shared slot.",
                ),
                "keepOffRefusingNodes": {
                    "type": "boolean",
                    "description": "Add required node affinity keeping a multi-slot container "
                    "off nodes whose device plugin refuses it; default true.",
                },
            },
            description="How the NVIDIA device plugin allocates shared GPUs (its config is "
            "not read from the cluster).",
        ),
        "ignoredResources": {
            **_STR_LIST,
            "description": "Extended resources (globs) the scheduler is told to ignore "
            "(ignoredResources, ignoredResourceGroups): never called unknown.",
        },
        # Issue 26: private images and the CUDA version they are built on.
        "cudaImages": {
            "type": "array",
            "description": "Image patterns (globs) and the CUDA version they need, for the "
            "cudaDriver check; before the shipped table of public images.",
            "items": _obj(
                {
                    "image": {"type": "string", "minLength": 1},
                    "cuda": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+(\\.[0-9]+)?$"},
                },
                required=["image", "cuda"],
            ),
        },
        # Issue 23, rest: how the Karpenter controller treats minValues.
        "minValuesPolicy": {
            "enum": ["Strict", "BestEffort"],
            "description": "Karpenter's --min-values-policy, as the controller runs: Strict "
            "(its default) launches no node for a pod when fewer than minValues distinct "
            "values remain among the instance types that hold it, and such a pod is denied; "
            "BestEffort relaxes minValues. Not set: judged as Strict, but warned, not denied "
            "(the flag is not in the API).",
        },
    }
)
_NODE_POOL = _obj(
    {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "taints": {"type": "array", "items": _TAINT},
        "allocatable": {
            "type": "object",
            "additionalProperties": _QUANTITY,
            "minProperties": 1,
        },
        "maxNodes": {"type": "integer", "minimum": 1},
    },
    required=["allocatable"],
)
_INSTANCE_TYPE = _obj(
    {
        "instanceType": {"type": "string", "minLength": 1, "description": "e.g. p5.48xlarge"},
        "provider": {"enum": ["aws", "azure", "gcp"]},
        "gpu": _obj(
            {
                "resource": {"type": "string", "minLength": 1},
                "model": {"type": "string", "minLength": 1},
                "count": {"type": "integer", "minimum": 1},
                "memoryMiB": {"type": "integer", "minimum": 0},
            },
            required=["resource", "model", "count", "memoryMiB"],
        ),
        "vcpu": {"type": "integer", "minimum": 1},
        "memoryMiB": {"type": "integer", "minimum": 1},
        "pods": {"type": "integer", "minimum": 1},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "source": {
            "type": "string",
            "minLength": 1,
            "description": "Where the numbers are published.",
        },
    },
    required=["instanceType", "provider", "gpu", "vcpu", "memoryMiB", "source"],
)
_WORKLOAD_KIND = _obj(
    {
        "group": {"type": "string"},
        "kind": {"type": "string", "minLength": 1},
        "templates": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {
                    "path": {"type": "string", "minLength": 1},
                    "replicas": _STR_LIST,
                    "podSpec": {"type": "boolean"},
                },
                required=["path"],
            ),
        },
        "plural": {
            "type": "string",
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "description": (
                "The kind's resource name in API paths and webhook rules (its CRD's "
                "spec.names.plural); default: the kind in lower case plus s."
            ),
        },
        "scale": _obj(
            {
                "specReplicasPath": {
                    "type": "string",
                    "pattern": "^[.]?spec[.][^*]+$",
                    "description": (
                        "The CRD's subresources.scale.specReplicasPath: the field a "
                        "kubectl scale or an HPA sets."
                    ),
                }
            },
            required=["specReplicasPath"],
            description=(
                "The kind's scale subresource, judged when the webhook configuration "
                "routes <plural>/scale to the webhook."
            ),
        ),
    },
    required=["group", "kind", "templates"],
)


def _document(kind: str, spec: dict[str, Any], description: str) -> dict[str, Any]:
    return _obj(
        {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        required=["apiVersion", "kind", "metadata", "spec"],
        description=description,
    )


DOCUMENT_KINDS: dict[str, dict[str, Any]] = {
    "GPUPolicy": _document(
        "GPUPolicy", _GPU_POLICY, "Rules: which pods, what to check, what to set."
    ),
    "GPUSettings": _document("GPUSettings", _SETTINGS, "Cluster-wide settings; at most one."),
    # Not NodePool: as a CRD, ``kubectl get nodepools`` would be ambiguous with Karpenter's.
    "GPUNodePool": _document(
        "GPUNodePool", _NODE_POOL, "Nodes an autoscaler may create on demand."
    ),
    "WorkloadKind": _document(
        "WorkloadKind", _WORKLOAD_KIND, "Where a custom resource keeps its pod templates."
    ),
    "InstanceType": _document(
        "InstanceType",
        _INSTANCE_TYPE,
        "A GPU instance type for the catalogue Karpenter NodePools are sized by.",
    ),
}


# Kinds that were renamed, and why: a document of the old kind is told the new name.
RENAMED_KINDS = {
    "NodePool": (
        "GPUNodePool",
        "renamed so that kubectl get nodepools keeps meaning Karpenter's NodePool",
    ),
}


def rules_schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gpu-webhook.io/schemas/rules.schema.json",
        "title": "gpu-admission-webhook rule file document",
        "type": "object",
        "required": ["apiVersion", "kind"],
        "oneOf": [
            {"if": {"properties": {"kind": {"const": k}}}, "then": s, "else": False}
            for k, s in DOCUMENT_KINDS.items()
        ],
    }
