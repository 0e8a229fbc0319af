"""``gpuAccessWithoutRequest`` in CEL: the ways a container reaches GPUs that the pod spec
alone shows (``demand.gpuaccess``), for ``admissionpolicies``."""

from __future__ import annotations

from webhook.engine.policy.admissioncel.pod import CONTAINERS, holds_claims, quote, section

# GPU device nodes and the directories that hold them, for a host path already in clean
# form (``gpuaccess._device_path`` after ``on_host``): /dev/nvidia*, /dev/dri, /dev,
# /dev/char and its 195 (NVIDIA) and 226 (DRM) links, each also under the GPU operator's
# driver root; /, /run, /run/nvidia and the driver root itself.
DEVICE_PATH = (
    "^((/var)?/run/nvidia/driver)?(/dev|/dev/char|/dev/nvidia.*|/dev/dri(/.*)?"
    "|/dev/char/(195|226):[0-9]+(/.*)?)$|^/$|^(/var)?/run(/nvidia(/driver)?)?$"
)
# A path as ``resolved`` leaves it: no empty, ``.`` or ``..`` segment, no trailing slash.
CLEAN = "^/$|^(/[^/]+)+$"
UNCLEAN_SEGMENT = "/\\.\\.?(/|$)"
DEVICE_LIST = "^/var/run/nvidia-container-devices.+$"
# Values whose entries the toolkit and the webhook trim alike (spaces only).
PLAIN_VALUE = "^[-A-Za-z0-9_:., ]+$"
HIDES = "(^|,) *(void|none) *(,|$)"
NO_CAPABILITIES = "^( *(none|void)? *,)* *(none|void)? *$"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
UNSEEN = (
    "has(e.valueFrom) && (has(e.valueFrom.configMapKeyRef) || has(e.valueFrom.secretKeyRef)"
    " || has(e.valueFrom.resourceFieldRef))"
)


def _clean(path: str) -> str:
    return f"{path}.matches({quote(CLEAN)}) && !{path}.matches({quote(UNCLEAN_SEGMENT)})"


NO_SUB_PATH = "(!has(m.subPath) || m.subPath == '') && (!has(m.subPathExpr) || m.subPathExpr == '')"
ACCESS_VARIABLES = [
    {
        "name": "hostPaths",
        "expression": "has(object.spec.volumes) ? "
        "object.spec.volumes.filter(v, has(v.hostPath)) : []",
    },
    {
        "name": "charDevices",
        "expression": "variables.hostPaths.filter(v, has(v.hostPath.type) && "
        "v.hostPath.type == 'CharDevice').map(v, v.name)",
    },
    {
        "name": "deviceDirectories",
        "expression": f"variables.hostPaths.filter(v, {_clean('v.hostPath.path')} && "
        f"v.hostPath.path.matches('{DEVICE_PATH}')).map(v, v.name)",
    },
    {
        "name": "nullDevices",
        "expression": "variables.hostPaths.filter(v, v.hostPath.path == '/dev/null')"
        ".map(v, v.name)",
    },
]


def _last(c: str, name: str) -> str:
    return f"{c}.env.filter(e, e.name == {quote(name)})"


def _env_access(c: str) -> str:
    """The last ``NVIDIA_VISIBLE_DEVICES`` shows GPUs or hides its value; else the last
    ``NVIDIA_DRIVER_CAPABILITIES`` adds some or hides its value (``gpuaccess.env_access``):
    plain values only (no ``$``), read as the toolkit reads them."""
    visible, capabilities = _last(c, VISIBLE), _last(c, CAPABILITIES)
    shows = f"(has(e.value) && e.value.matches('{PLAIN_VALUE}') && !e.value.matches('{HIDES}'))"
    adds = (
        f"(has(e.value) && e.value.matches('{PLAIN_VALUE}') && "
        f"!e.value.matches('{NO_CAPABILITIES}'))"
    )
    return (
        f"has({c}.env) && ({visible}.exists(e, true) ? "
        f"[{visible}[size({visible}) - 1]].exists(e, {shows} || ({UNSEEN})) : "
        f"[{capabilities}].exists(l, size(l) > 0 && [l[size(l) - 1]].exists(e, {adds} || "
        f"({UNSEEN}))))"
    )


def _mounts(c: str, condition: str) -> str:
    return f"has({c}.volumeMounts) && {c}.volumeMounts.exists(m, {condition})"


DEVICE_LIST_MOUNT = (
    f"m.name in variables.nullDevices && {NO_SUB_PATH} && m.mountPath.matches('{DEVICE_LIST}')"
    f" && {_clean('m.mountPath')}"
)
DEVICE_MOUNT = (
    f"m.name in variables.charDevices || (m.name in variables.deviceDirectories && {NO_SUB_PATH})"
)


def asks_at_least(c: str) -> str:
    """True for every container the webhook says asks for a GPU (``gpuaccess.asks_for_gpu``):
    any extended resource above a plain zero (a DRA class may serve any name as a GPU), or
    a claim."""
    nonzero = "r.contains('/') && string({c}.resources.{part}[r]) != '0'"
    return (
        f"({section(c, 'limits')} && {c}.resources.limits.exists(r, "
        f"{nonzero.format(c=c, part='limits')})) || "
        f"({section(c, 'requests')} && {c}.resources.requests.exists(r, "
        f"{nonzero.format(c=c, part='requests')})) || "
        f"{holds_claims(c)}"
    )


def access_rules(exempt: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The variables and the one validation of the access policy; ``exempt``: the CEL of
    the pods the rules exempt (``false``: none)."""
    reaches = (
        f"({_mounts('c', DEVICE_LIST_MOUNT)}) || (!({asks_at_least('c')}) && "
        f"(({_env_access('c')}) || ({_mounts('c', DEVICE_MOUNT)})))"
    )
    variables = [
        {"name": "containers", "expression": CONTAINERS},
        *ACCESS_VARIABLES,
        {"name": "reaching", "expression": f"variables.containers.filter(c, {reaches})"},
    ]
    validation = {
        "expression": "size(variables.reaching) == 0"
        if exempt == "false"
        else f"({exempt}) || size(variables.reaching) == 0",
        "messageExpression": "'container \"' + variables.reaching[0].name + '\" reaches GPUs "
        "it does not request (NVIDIA_VISIBLE_DEVICES or NVIDIA_DRIVER_CAPABILITIES, a hostPath "
        "of GPU device nodes, or the host\\'s /dev/null in the NVIDIA runtime\\'s device "
        "list): the scheduler and quotas do not count them. Request a GPU in its "
        "resources.limits, or remove that access (gpu-webhook explain names it).'",
        "reason": "Forbidden",
    }
    return variables, validation
