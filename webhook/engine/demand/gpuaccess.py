"""GPU access: whether a container asks for a GPU, and how it can reach GPUs without asking.

A GPU that a container uses without asking for it is invisible to the scheduler, to quotas
and to capacity checks. With the NVIDIA container runtime as a node's default runtime, a
container reaches GPUs without a request through:

- ``NVIDIA_VISIBLE_DEVICES`` (every ``nvidia/cuda`` image sets ``all``), or
  ``NVIDIA_DRIVER_CAPABILITIES`` completing the image's ``NVIDIA_VISIBLE_DEVICES``;
- a ``hostPath`` of the device nodes (``/dev/nvidia*``, ``/dev/dri``, ``/dev`` or ``/``,
  which hold them, a ``CharDevice``);
- ``privileged: true``, which gives a container every device of its node;
- a mount of the host's ``/dev/null`` under ``/var/run/nvidia-container-devices``, the
  device list the toolkit reads from volume mounts before the variable (its hardened
  setting, and the device plugin's ``DEVICE_LIST_STRATEGY=volume-mounts``).

Where the NVIDIA runtime is not the default, a pod reaches it by its RuntimeClass: every
container of a pod with ``runtimeClassName: nvidia`` runs under it, and a CUDA image's
``NVIDIA_VISIBLE_DEVICES=all`` then hands it the node's GPUs.

Only what the pod spec shows can be judged here: variables an image sets, and keys of the
ConfigMaps and Secrets behind ``envFrom``, are not visible (``hideGPUsFromNonGPUContainers:
gpuNodes`` covers them: ``env`` overrides both).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.demand.gpus import Container, PodGPUs

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def asks_for_gpu(container: Container) -> bool:
    """Whether a container asks for a GPU: the one definition every GPU access rule uses.

    A GPU resource counts, and so does one written wrongly (its quantity problems are other
    checks' findings). A DRA claim in ``resources.claims`` counts too, unless the inventory
    shows that none of the claims it names can give a GPU (``dra.pod_claims`` marks it
    ``claims_no_gpu``: a NIC's class); a claim or class the inventory does not know may
    be a GPU's, and judging a claimed GPU as unrequested would be a false denial.
    """
    if container.gpus or container.problems:  # gpus holds only counts above zero
        return True
    if container.claims_no_gpu:
        return False
    resources = container.body.get("resources")
    claims = resources.get("claims") if isinstance(resources, dict) else None
    return isinstance(claims, list) and bool(claims)


def pod_asks_for_gpu(pod: PodGPUs) -> bool:
    return bool(pod.total or pod.problems) or any(asks_for_gpu(c) for c in pod.containers)


# --- what the NVIDIA container runtime does with the variables ---------------------------


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def exposes_devices(value: str) -> bool:
    """Whether ``NVIDIA_VISIBLE_DEVICES=value`` gives a container GPUs.

    As nvidia-container-toolkit reads it (internal/config/image/cuda_image.go
    ``devicesFromEnvvars``, devices.go ``NewVisibleDevices``): comma-separated, trimmed;
    empty or any ``void`` entry exposes nothing; otherwise the first of ``all`` and
    ``none`` decides; device indexes or UUIDs alone expose those devices.
    """
    entries = _entries(value)
    if not entries or "void" in entries:
        return False
    for entry in entries:
        if entry == "all":
            return True
        if entry == "none":
            return False
    return True


def adds_capabilities(value: str) -> bool:
    """``NVIDIA_DRIVER_CAPABILITIES`` other than empty, ``none`` or ``void``: the driver
    libraries for the image's own ``NVIDIA_VISIBLE_DEVICES`` (``all`` in CUDA images)."""
    return bool(set(_entries(value)) - {"none", "void"})


# --- reading a container's environment as the kubelet builds it --------------------------


@dataclass(frozen=True, slots=True)
class EnvValue:
    """A variable's value as far as the spec shows it; ``value`` ``None``: not visible."""

    value: str | None
    source: str  # "value", "a ConfigMap", "a Secret", "a field", ...


def _field_value(field_path: object, metadata: Mapping[str, Any]) -> str | None:
    match = _FIELD.match(str(field_path))
    if match is None:
        return None
    values = metadata.get(match.group(1))
    value = values.get(match.group(2)) if isinstance(values, dict) else None
    return str(value) if value is not None else ""


def _from_source(ref: Mapping[str, Any], metadata: Mapping[str, Any]) -> EnvValue:
    if "configMapKeyRef" in ref:
        return EnvValue(None, "a ConfigMap")
    if "secretKeyRef" in ref:
        return EnvValue(None, "a Secret")
    if "fieldRef" in ref:
        field_ref = ref.get("fieldRef")
        path = field_ref.get("fieldPath") if isinstance(field_ref, dict) else None
        return EnvValue(_field_value(path, metadata), f"the field {path}")
    return EnvValue(None, "a resource field")


def _expand(text: str, known: Mapping[str, EnvValue], opaque: bool) -> str | None:
    """``$(NAME)`` as the kubelet expands it (from variables defined earlier; ``$$`` is a
    literal ``$``; an unknown name stays as written). ``None`` when it depends on a value
    the spec does not show, or on ``envFrom`` keys (``opaque``)."""
    unseen = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unseen
        name = match.group(1)
        if name is None:
            return "$"
        found = known.get(name)
        if found is None:
            unseen = unseen or opaque
            return match.group(0)
        if found.value is None:
            unseen = True
            return ""
        return found.value

    expanded = _REFERENCE.sub(replace, text)
    return None if unseen else expanded


def environment(body: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, EnvValue]:
    """A container's variables from ``env`` (``envFrom`` keys are not visible). Later
    entries win, as in the kubelet's ``makeEnvironmentVariables``
    (pkg/kubelet/kubelet_pods.go)."""
    env = body.get("env")
    opaque = bool(body.get("envFrom"))
    known: dict[str, EnvValue] = {}
    for entry in env if isinstance(env, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        ref = entry.get("valueFrom")
        if isinstance(ref, dict):
            known[entry["name"]] = _from_source(ref, metadata)
        else:
            raw = entry.get("value")
            text = "" if raw is None else str(raw)
            known[entry["name"]] = EnvValue(_expand(text, known, opaque), "value")
    return known


# --- the ways to a GPU ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Access:
    """One way a container reaches GPUs: what it does, what to change, and in a few words."""

    what: str
    fix: str
    short: str


def _shown(name: str, value: EnvValue) -> str:
    if value.value is None:
        return f"sets {name} from {value.source}, whose value the webhook cannot see"
    return f"sets {name}={value.value}"


def _short(name: str, value: EnvValue) -> str:
    return f"{name} from {value.source}" if value.value is None else f"{name}={value.value}"


def _last_literals(env: object) -> dict[str, str] | None:
    """The last ``value`` of each of the two variables, when the spec shows it plainly (no
    ``valueFrom``, no ``$(...)``), without building the whole environment; ``None`` when a
    value needs the environment to be read."""
    found: dict[str, str] = {}
    for entry in env if isinstance(env, list) else ():
        if not isinstance(entry, dict):
            continue
        name = entry.get("name")
        if name not in (VISIBLE_DEVICES, DRIVER_CAPABILITIES):
            continue
        raw = entry.get("value")
        text = "" if raw is None else str(raw)
        if "valueFrom" in entry or "$(" in text:
            return None
        found[name] = text
    return found


def env_access(body: Mapping[str, Any], metadata: Mapping[str, Any]) -> list[Access]:
    """A value the spec shows that exposes GPUs, or one it hides behind a ConfigMap, Secret
    or field: a container that asks for no GPU has no use for either."""
    literals = _last_literals(body.get("env"))
    if literals == {}:
        return []  # most containers name neither variable
    env = (
        {name: EnvValue(value, "value") for name, value in literals.items()}
        if literals is not None
        else environment(body, metadata)
    )
    visible, capabilities = env.get(VISIBLE_DEVICES), env.get(DRIVER_CAPABILITIES)
    if visible is not None:
        if visible.value is None or exposes_devices(visible.value):
            fix = f"remove {VISIBLE_DEVICES} or set it to void"
            return [Access(_shown(VISIBLE_DEVICES, visible), fix, _short(VISIBLE_DEVICES, visible))]
        return []  # hidden explicitly: capabilities without devices expose nothing
    if capabilities is not None and (
        capabilities.value is None or adds_capabilities(capabilities.value)
    ):
        return [
            Access(
                _shown(DRIVER_CAPABILITIES, capabilities)
                + " (with the image's NVIDIA_VISIBLE_DEVICES, all in CUDA images)",
                f"remove {DRIVER_CAPABILITIES} or set {VISIBLE_DEVICES}=void",
                _short(DRIVER_CAPABILITIES, capabilities),
            )
        ]
    return []


def resolved(path: str) -> str:
    """A path as the kernel resolves it, symlinks aside (the host's are not visible here):
    repeated slashes are one, ``.`` is dropped, ``..`` goes up (and stays at ``/``), a
    trailing slash is dropped. ``posixpath.normpath`` keeps a leading ``//``, which POSIX
    leaves to the implementation: Linux reads it as ``/`` (fs/namei.c skips every slash)."""
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


# The GPU operator's driver container keeps its root, and the device nodes it creates in
# its /dev, at /run/nvidia/driver on the host (gpu-operator assets/state-driver, the
# "run-nvidia" volume; nvidia-container-toolkit reads driverRoot/dev the same way).
DRIVER_ROOTS = ("/run/nvidia/driver",)
# Links every distribution ships (FHS: /var/run is /run).
_HOST_LINKS = (("/var/run", "/run"),)
# /dev/char/MAJOR:MINOR links (udev, and ``nvidia-ctk system create-dev-char-symlinks``,
# nvidia-container-toolkit cmd/nvidia-ctk/system/create-dev-char-symlinks) lead to the
# device nodes: 195 is NVIDIA's fixed character major (nvidia0.., nvidiactl 195:255,
# nvidia-modeset 195:254), 226 is DRM's (/dev/dri). nvidia-uvm and nvidia-caps take dynamic
# majors, so their links are not known here; alone they reach no GPU.
_CHAR_MAJORS = {"195": "/dev/nvidia", "226": "/dev/dri"}
_CHAR_LINK = re.compile(r"^/dev/char/(\d+):(\d+)(/.*)?$")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def on_host(path: str) -> str:
    """A resolved host path through the links whose targets are known: ``/var/run``, and a
    driver root's files as the host's own (``/run/nvidia/driver/dev`` is the driver's
    ``/dev``). ``/dev/char`` links are followed by ``_device_path``."""
    for link, target in _HOST_LINKS:
        if _under(path, link):
            path = target + path[len(link) :]
    for root in DRIVER_ROOTS:
        if _under(path, root):
            return resolved("/" + path[len(root) :])
    return path


def _device_path(path: str) -> bool:
    """GPU device nodes (``/dev/nvidia*``, ``/dev/dri``, their ``/dev/char`` links), or a
    directory that holds them: ``/``, ``/dev``, ``/dev/char``, a driver root or one of its
    parents (``/run``, ``/run/nvidia``): the mount brings the device nodes with it."""
    path = on_host(path)
    if path in ("/", "/dev", "/dev/char") or path.startswith("/dev/nvidia"):
        return True
    if any(root.startswith(path + "/") for root in DRIVER_ROOTS):
        return True
    link = _CHAR_LINK.match(path)
    if link is not None and link.group(1) in _CHAR_MAJORS:
        return True
    return _under(path, "/dev/dri")


def _host_paths(spec: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    volumes = spec.get("volumes")
    out: dict[str, Mapping[str, Any]] = {}
    for volume in volumes if isinstance(volumes, list) else ():
        if isinstance(volume, dict) and isinstance(volume.get("hostPath"), dict):
            out[str(volume.get("name"))] = volume["hostPath"]
    return out


def host_paths(spec: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The pod's ``hostPath`` volumes by name: read once per pod, asked per container."""
    return _host_paths(spec)


def _sub_path(
    body: Mapping[str, Any], mount: Mapping[str, Any], metadata: Mapping[str, Any]
) -> str | None:
    """The mount's ``subPath``, or its ``subPathExpr`` expanded from the container's env as
    the kubelet does (pkg/kubelet/kubelet_pods.go ``makeMounts``: ``$(NAME)`` from the
    container's variables); ``None`` when there is none or its value is not visible."""
    sub = mount.get("subPath")
    if sub:
        return str(sub)
    expr = mount.get("subPathExpr")
    if not expr:
        return None
    return _expand(str(expr), environment(body, metadata), bool(body.get("envFrom")))


# --- the toolkit's device list from volume mounts ------------------------------------------

# nvidia-container-toolkit internal/config/image/cuda_image.go: with
# ``accept-nvidia-visible-devices-as-volume-mounts = true`` the runtime takes a container's
# device list from its mounts of the host's /dev/null under this root (``requestsFromMounts``)
# before NVIDIA_VISIBLE_DEVICES (``VisibleDevices``), whatever the variable says; the device
# plugin's DEVICE_LIST_STRATEGY=volume-mounts hands out GPUs so (k8s-device-plugin
# internal/plugin/server.go ``updateResponseForDeviceMounts``: /dev/null at
# ROOT/<device id> and ROOT/imex/<channel>). The toolkit compares the mount's destination
# as text: /run/nvidia-container-devices is another path to it, whatever the image links.
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
NULL_DEVICE = "/dev/null"
_CDI_PREFIX = "cdi/"
_IMEX_PREFIX = "imex/"


def device_list_request(mount_path: str) -> str | None:
    """The device a mount at ``mount_path`` asks for, as ``requestsFromMounts`` reads it:
    the destination cleaned (``filepath.Clean``, which ``resolved`` is), taken when it
    begins with the root as text (``strings.HasPrefix``: ``.../nvidia-container-devicesall``
    asks for ``all``), what follows with its slashes trimmed; nothing at the root itself."""
    destination = resolved(mount_path)
    if not destination.startswith(DEVICE_LIST_ROOT):
        return None
    return destination[len(DEVICE_LIST_ROOT) :].strip("/") or None


def device_list_wanted(request: str) -> str:
    """What a device-list entry gives, in words (``visibleDevicesFromMounts``,
    ``imexChannelsFromMounts``, ``cdiDeviceMountRequest``)."""
    if request.startswith(_IMEX_PREFIX):
        return f"the IMEX channel {request[len(_IMEX_PREFIX) :]}"
    if request.startswith(_CDI_PREFIX):
        return f"the CDI device {request[len(_CDI_PREFIX) :]}"
    if request == "all":
        return "every GPU of its node"
    return f"the device {request}"


@dataclass(frozen=True, slots=True)
class DeviceListMount:
    """A ``hostPath`` mount whose destination is an entry of the toolkit's device list.

    ``null``: its host path is ``/dev/null`` (any ``type``; any spelling that cleans to
    it), so the runtime reads the entry. Otherwise the entry counts only where the node
    links that path to /dev/null (containerd resolves a host path's links before the
    runtime sees it: internal/cri/opts/spec_linux_opts.go ``WithMounts``,
    ``ResolveSymbolicLink``; systemd's masked units are such links), which is not visible
    here."""

    volume: str
    mount_path: str
    request: str
    host_path: str
    host_type: str
    null: bool

    def access(self) -> Access:
        return Access(
            f'mounts the host\'s {NULL_DEVICE} (volume "{self.volume}") at {self.mount_path}, '
            f"which asks the NVIDIA runtime for {device_list_wanted(self.request)} where "
            "it reads device lists from volume mounts (nvidia-container-toolkit's "
            "accept-nvidia-visible-devices-as-volume-mounts), before NVIDIA_VISIBLE_DEVICES",
            f'remove the mount of volume "{self.volume}"',
            f"{NULL_DEVICE} mounted at {self.mount_path}",
        )


def device_list_mounts(
    body: Mapping[str, Any], paths: Mapping[str, Any], metadata: Mapping[str, Any]
) -> list[DeviceListMount]:
    """The container's ``hostPath`` mounts at an entry of the device list. Only a
    ``hostPath`` can put the host's /dev/null there: other volumes are the kubelet's own
    directories. A ``subPath`` (or a ``subPathExpr`` whose visible value is not empty) is
    mounted from the kubelet's bind of it under volume-subpaths
    (pkg/kubelet/kubelet_pods.go ``makeMounts``, ``PrepareSafeSubpath``), never from
    /dev/null itself, so the toolkit skips it (a ``subPathExpr`` whose value is not
    visible is judged without it). Of the /dev/null mounts at one destination
    the first counts, as the toolkit's ``seen`` keeps it."""
    mounts = body.get("volumeMounts")
    found: list[DeviceListMount] = []
    seen: set[str] = set()
    for mount in mounts if isinstance(mounts, list) else ():
        if not isinstance(mount, dict):
            continue
        host = paths.get(str(mount.get("name")))
        request = device_list_request(str(mount.get("mountPath") or ""))
        if host is None or request is None:
            continue
        if _sub_path(body, mount, metadata):
            continue
        destination = resolved(str(mount.get("mountPath")))
        base = str(host.get("path") or "")
        null = resolved(base) == NULL_DEVICE
        if null:
            if destination in seen:
                continue
            seen.add(destination)
        kind = str(host.get("type") or "")
        found.append(
            DeviceListMount(str(mount.get("name")), destination, request, base, kind, null)
        )
    return found


def mount_access(
    body: Mapping[str, Any],
    spec: Mapping[str, Any],
    paths: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> list[Access]:
    """A mounted ``hostPath`` of GPU device nodes: ``/dev/nvidia*``, ``/dev/dri``, their
    ``/dev/char`` links, a directory that holds them (``/dev``, ``/``, the driver root) (a
    ``subPath`` or a visible ``subPathExpr`` counts), or any ``CharDevice``; paths as the
    kernel resolves them (``//dev``, ``/dev/../dev/nvidia0``). A mount of /dev/null into
    the toolkit's device list (``device_list_mounts``) is said as such."""
    host_paths = _host_paths(spec) if paths is None else paths
    if not host_paths:
        return []
    mounts = body.get("volumeMounts")
    listed = [m for m in device_list_mounts(body, host_paths, metadata or {}) if m.null]
    found = [m.access() for m in listed]
    said = {(m.volume, m.mount_path) for m in listed}
    for mount in mounts if isinstance(mounts, list) else ():
        if not isinstance(mount, dict):
            continue
        host = host_paths.get(str(mount.get("name")))
        if host is None:
            continue
        if said and (str(mount.get("name")), resolved(str(mount.get("mountPath")))) in said:
            continue  # a CharDevice /dev/null in the device list: said once, as such
        base = str(host.get("path") or "")
        # A subPathExpr whose value is not visible is judged by its base path.
        sub = _sub_path(body, mount, metadata or {})
        path = resolved(posixpath.join(base, sub) if sub else base or "/")
        if host.get("type") == "CharDevice" or _device_path(path):
            shown = f"{base} with subPath {sub}" if sub else base
            found.append(
                Access(
                    f'mounts the host path {shown} (volume "{mount.get("name")}")',
                    f'remove the mount of volume "{mount.get("name")}"',
                    f"hostPath {path}",
                )
            )
    return found


def may_reach(body: Mapping[str, Any]) -> bool:
    """Whether a container as written could reach GPUs at all: it names one of the
    variables, mounts a volume or asks for privilege. Mutations add none of these (hiding
    adds NVIDIA_VISIBLE_DEVICES=void, which reaches nothing), so this cheap look at the
    original spares the rest for most containers."""
    env = body.get("env")
    if isinstance(env, list) and any(
        isinstance(e, dict) and e.get("name") in (VISIBLE_DEVICES, DRIVER_CAPABILITIES) for e in env
    ):
        return True
    return bool(body.get("volumeMounts")) or privileged(body)


def privileged(body: Mapping[str, Any]) -> bool:
    context = body.get("securityContext")
    return isinstance(context, dict) and context.get("privileged") is True


# The RuntimeClasses the GPU operator creates, each with the handler of its name (gpu-operator
# controllers/object_controls.go, the runtime classes of the toolkit's state: "nvidia", and
# "nvidia-cdi" and "nvidia-legacy" for its two modes). A class a rule sets with
# mutate.runtimeClassName is the policy's own word that it runs GPU pods: it counts too.
NVIDIA_RUNTIME_CLASSES = frozenset({"nvidia", "nvidia-cdi", "nvidia-legacy"})
# The handlers of those classes (the containerd or CRI-O runtimes the toolkit configures,
# nvidia-container-toolkit cmd/nvidia-ctk/runtime/configure): a class of any name with one
# of them runs NVIDIA's runtime, as the inventory shows.
NVIDIA_HANDLERS = frozenset({"nvidia", "nvidia-cdi", "nvidia-legacy", "nvidia-experimental"})


def nvidia_classes(classes: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The names of the (name, handler) RuntimeClasses whose handler is NVIDIA's."""
    return frozenset(name for name, handler in classes if handler in NVIDIA_HANDLERS)


def runtime_access(body: Mapping[str, Any], runtime_class: str) -> list[Access]:
    """A container under the NVIDIA runtime that does not set ``NVIDIA_VISIBLE_DEVICES``
    in its ``env``: the image's value decides, and every CUDA image's is ``all``. One that
    sets it is judged by ``env_access`` (``void`` hides, ``all`` exposes)."""
    env = body.get("env")
    if isinstance(env, list) and any(
        isinstance(e, dict) and e.get("name") == VISIBLE_DEVICES for e in env
    ):
        return []
    return [
        Access(
            f'runs under the NVIDIA runtime (runtimeClassName "{runtime_class}"), which gives it '
            f"every GPU of its node when its image sets {VISIBLE_DEVICES} (all in every CUDA "
            "image)",
            f"set {VISIBLE_DEVICES}=void in its env, or remove runtimeClassName",
            f"runtimeClassName {runtime_class}",
        )
    ]


PRIVILEGED = Access(
    "is privileged (every device of its node) in a pod that can land on a GPU node",
    "drop privileged",
    "privileged",
)
