"""How a container asks for a GPU, and how it reaches GPUs without asking: as the NVIDIA
container runtime and the kubelet read the pod spec."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.demand.gpuaccess import (
    adds_capabilities,
    asks_for_gpu,
    device_list_mounts,
    device_list_request,
    env_access,
    environment,
    exposes_devices,
    mount_access,
    resolved,
)
from webhook.engine.demand.gpus import pod_gpus
from webhook.engine.policy.ruleset import GPUResources


@pytest.mark.parametrize(
    ("value", "exposes"),
    [
        pytest.param("all", True, id="all"),
        pytest.param("0", True, id="an index"),
        pytest.param("GPU-5d9c1f2a-0b6e-4c1e-9f3a-1b2c3d4e5f60", True, id="a UUID"),
        pytest.param(" 0 , 1 ", True, id="indexes with spaces"),
        pytest.param("nvidia.com/gpu=all", True, id="a CDI device name"),
        pytest.param("void", False, id="void"),
        pytest.param("none", False, id="none: driver only, no device"),
        pytest.param("", False, id="empty"),
        pytest.param(" , ", False, id="only separators"),
        pytest.param("0,void", False, id="any void entry hides all"),
        pytest.param("none,all", False, id="none before all"),
        pytest.param("all,none", True, id="all before none"),
    ],
)
def test_nvidia_visible_devices_exposes_gpus_as_the_toolkit_reads_it(
    value: str, exposes: bool
) -> None:
    assert exposes_devices(value) is exposes


@pytest.mark.parametrize(
    ("value", "adds"),
    [
        pytest.param("all", True, id="all"),
        pytest.param("compute,utility", True, id="compute"),
        pytest.param("", False, id="empty"),
        pytest.param("none", False, id="none"),
        pytest.param("void, none", False, id="void and none"),
    ],
)
def test_driver_capabilities_add_to_the_images_devices_unless_empty_none_or_void(
    value: str, adds: bool
) -> None:
    assert adds_capabilities(value) is adds


def _env(*entries: dict[str, Any], env_from: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "c", "env": list(entries)}
    if env_from:
        body["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    return body


def test_the_last_of_duplicate_variables_wins_as_in_the_kubelet() -> None:
    body = _env(
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    )
    assert env_access(body, {}) == []


@pytest.mark.parametrize(
    ("entries", "env_from", "value"),
    [
        pytest.param([{"name": "A", "value": "0"}], False, "0", id="an earlier variable"),
        pytest.param([], False, "$(A)", id="an unknown name stays as written"),
        pytest.param([], True, None, id="an unknown name may come from envFrom"),
        pytest.param([{"name": "A", "value": "0"}], True, "0", id="env wins over envFrom"),
    ],
)
def test_references_expand_from_earlier_variables(
    entries: list[dict[str, Any]], env_from: bool, value: str | None
) -> None:
    body = _env(*entries, {"name": "X", "value": "$(A)"}, env_from=env_from)
    assert environment(body, {})["X"].value == value


def test_a_double_dollar_is_a_literal_dollar() -> None:
    body = _env({"name": "A", "value": "0"}, {"name": "X", "value": "$$(A)"})
    assert environment(body, {})["X"].value == "$(A)"


@pytest.mark.parametrize(
    ("ref", "value"),
    [
        pytest.param({"fieldRef": {"fieldPath": "metadata.labels['gpus']"}}, "all", id="label"),
        pytest.param({"fieldRef": {"fieldPath": "metadata.annotations['x']"}}, "", id="missing"),
        pytest.param({"fieldRef": {"fieldPath": "spec.nodeName"}}, None, id="node name"),
        pytest.param({"configMapKeyRef": {"name": "c", "key": "k"}}, None, id="configmap"),
        pytest.param({"secretKeyRef": {"name": "s", "key": "k"}}, None, id="secret"),
    ],
)
def test_field_references_to_the_pods_own_metadata_are_read(
    ref: dict[str, Any], value: str | None
) -> None:
    body = _env({"name": "X", "valueFrom": ref})
    assert environment(body, {"labels": {"gpus": "all"}})["X"].value == value


@pytest.mark.parametrize(
    ("path", "kernel"),
    [
        pytest.param("//dev/nvidia0", "/dev/nvidia0", id="a leading double slash is one"),
        pytest.param("///dev", "/dev", id="three slashes"),
        pytest.param("/dev//nvidia0/", "/dev/nvidia0", id="inner and trailing slashes"),
        pytest.param("/dev/../dev/./nvidia0", "/dev/nvidia0", id="dots and backsteps"),
        pytest.param("/../..", "/", id="backsteps stop at the root"),
        pytest.param("//", "/", id="the root written twice"),
    ],
)
def test_paths_resolve_as_the_linux_kernel_resolves_them(path: str, kernel: str) -> None:
    assert resolved(path) == kernel


@pytest.mark.parametrize(
    ("path", "sub", "kind", "found"),
    [
        pytest.param("/dev/nvidia0", None, None, True, id="a GPU device node"),
        pytest.param("/dev/nvidia-caps", None, None, True, id="MIG capabilities"),
        pytest.param("/dev/dri", None, None, True, id="DRI"),
        pytest.param("/dev//", None, None, True, id="/dev itself, unnormalised"),
        pytest.param("/", "dev/nvidiactl", None, True, id="through a subPath"),
        pytest.param("/opt/ctl", None, "CharDevice", True, id="any CharDevice"),
        pytest.param("/dev/shm", None, None, False, id="shared memory"),
        pytest.param("/", None, None, True, id="the host root, which holds /dev"),
        pytest.param("//dev/nvidia0", None, None, True, id="a leading double slash"),
        pytest.param("//dev", None, None, True, id="/dev behind a double slash"),
        pytest.param("///dev/", None, None, True, id="/dev behind three slashes"),
        pytest.param("/dev/../dev/nvidia0", None, None, True, id="a backstep"),
        pytest.param("/dev/./nvidia0", None, None, True, id="a dot"),
        pytest.param("/dev/", None, None, True, id="/dev with a trailing slash"),
        pytest.param("/", "./dev", None, True, id="a subPath with a dot"),
        pytest.param("//", "dev//nvidia0", None, True, id="slashes in both halves"),
        pytest.param("/", "etc", None, False, id="the host root narrowed to /etc"),
        pytest.param("//var/log", None, None, False, id="logs behind a double slash"),
        pytest.param("/device", None, None, False, id="a lookalike"),
        pytest.param("/dev/shm/../shm", None, None, False, id="shared memory, unnormalised"),
        pytest.param("/dev/char/195:0", None, None, True, id="a /dev/char link to nvidia0"),
        pytest.param("/dev/char/195:255", None, None, True, id="the link to nvidiactl"),
        pytest.param("/dev/char/226:128", None, None, True, id="the link to a DRI render node"),
        pytest.param("/dev/char", None, None, True, id="the links' directory"),
        pytest.param("/dev", "char/195:0", None, True, id="a link through a subPath"),
        pytest.param("/dev/char/10:200", None, None, False, id="the link to /dev/net/tun"),
        pytest.param("/dev/char/1950:0", None, None, False, id="a lookalike major"),
        pytest.param("/run/nvidia/driver", "dev", None, True, id="the driver root's /dev"),
        pytest.param("/run/nvidia/driver/dev", None, None, True, id="the driver's /dev"),
        pytest.param("/run/nvidia/driver/", None, None, True, id="the driver root"),
        pytest.param("/run/nvidia/driver/dev/nvidia0", None, None, True, id="a driver node"),
        pytest.param("/run/nvidia/driver/dev/char/195:1", None, None, True, id="its link"),
        pytest.param("/run/nvidia", None, None, True, id="the driver root's parent"),
        pytest.param("/var/run/nvidia/driver", None, None, True, id="through /var/run"),
        pytest.param("/run/nvidia/driver/../driver/dev/", None, None, True, id="backsteps"),
        pytest.param("/run/nvidia/driver", "etc", None, False, id="the driver's /etc"),
        pytest.param("/run/nvidia/mps", None, None, False, id="the MPS pipes"),
        pytest.param("/run/containerd", None, None, False, id="another /run directory"),
        pytest.param("/dev/fuse", None, None, False, id="an unrelated device"),
    ],
)
def test_host_paths_of_gpu_device_nodes_are_access(
    path: str, sub: str | None, kind: str | None, found: bool
) -> None:
    host: dict[str, Any] = {"path": path}
    if kind:
        host["type"] = kind
    mount: dict[str, Any] = {"name": "v", "mountPath": "/mnt"}
    if sub:
        mount["subPath"] = sub
    spec = {"volumes": [{"name": "v", "hostPath": host}]}
    assert bool(mount_access({"name": "c", "volumeMounts": [mount]}, spec)) is found


@pytest.mark.parametrize(
    ("env", "found"),
    [
        pytest.param([{"name": "D", "value": "dev"}], True, id="expanded to dev"),
        pytest.param([{"name": "D", "value": "etc"}], False, id="expanded to etc"),
        pytest.param([], False, id="an unknown name stays as written"),
        pytest.param(
            [{"name": "D", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
            True,
            id="a value not visible: judged by the base path",
        ),
    ],
)
def test_a_sub_path_expr_is_expanded_from_the_containers_env_as_the_kubelet_does(
    env: list[dict[str, Any]], found: bool
) -> None:
    spec = {"volumes": [{"name": "v", "hostPath": {"path": "/"}}]}
    body = {"name": "c", "env": env, "volumeMounts": [{"name": "v", "subPathExpr": "$(D)"}]}
    assert bool(mount_access(body, spec)) is found


@pytest.mark.parametrize(
    ("resources", "asks"),
    [
        pytest.param({"limits": {"nvidia.com/gpu": 1}}, True, id="a GPU limit"),
        pytest.param({"limits": {"nvidia.com/gpu": 0}}, False, id="zero GPUs"),
        pytest.param({"requests": {"nvidia.com/gpu": "0.5"}}, True, id="a wrong GPU ask"),
        pytest.param({"claims": [{"name": "gpu"}]}, True, id="a DRA claim"),
        pytest.param({"limits": {"nvidia.com/gpumem": 3000}}, False, id="not a GPU count"),
        pytest.param({}, False, id="nothing"),
    ],
)
def test_what_counts_as_asking_for_a_gpu(resources: dict[str, Any], asks: bool) -> None:
    spec = {"containers": [{"name": "c", "resources": resources}]}
    (container,) = pod_gpus(spec, GPUResources()).containers
    assert asks_for_gpu(container) is asks


# --- the toolkit's device list from volume mounts ------------------------------------------


@pytest.mark.parametrize(
    ("mount_path", "request_"),
    [
        pytest.param("/var/run/nvidia-container-devices/all", "all", id="all"),
        pytest.param("/var/run/nvidia-container-devices/0", "0", id="an index"),
        pytest.param(
            "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0",
            "cdi/nvidia.com/gpu/0",
            id="a CDI name",
        ),
        pytest.param("/var/run/nvidia-container-devices/imex/3", "imex/3", id="an IMEX channel"),
        pytest.param("/var/run/nvidia-container-devices/all/", "all", id="a trailing slash"),
        pytest.param("//var//run/nvidia-container-devices/./all", "all", id="slashes and dots"),
        pytest.param("/var/run/../run/nvidia-container-devices/all", "all", id="a backstep"),
        pytest.param(
            "/var/run/../var/run/nvidia-container-devices/all",
            None,
            id="a backstep to /var/var/run, lexically as the toolkit cleans it",
        ),
        pytest.param("/var/run/nvidia-container-devicesall", "all", id="the root as text"),
        pytest.param("/var/run/nvidia-container-devices", None, id="the root itself"),
        pytest.param("/var/run/nvidia-container-devices/", None, id="the root, a slash"),
        pytest.param("/run/nvidia-container-devices/all", None, id="/run is another path"),
        pytest.param("/var/run/nvidia-container-device/all", None, id="a lookalike"),
        pytest.param("var/run/nvidia-container-devices/all", None, id="a relative path"),
    ],
)
def test_a_mount_path_asks_for_the_device_the_toolkit_reads_from_it(
    mount_path: str, request_: str | None
) -> None:
    assert device_list_request(mount_path) == request_


def _mounted(volume: dict[str, Any], **mount: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    at = {"name": "v", "mountPath": "/var/run/nvidia-container-devices/all", **mount}
    return {"name": "c", "volumeMounts": [at]}, {"volumes": [{"name": "v", **volume}]}


@pytest.mark.parametrize(
    ("volume", "mount", "found"),
    [
        pytest.param({"hostPath": {"path": "/dev/null"}}, {}, True, id="/dev/null"),
        pytest.param(
            {"hostPath": {"path": "/dev/null", "type": "CharDevice"}}, {}, True, id="typed"
        ),
        pytest.param({"hostPath": {"path": "/dev/null", "type": "File"}}, {}, True, id="any type"),
        pytest.param({"hostPath": {"path": "//dev/./null/"}}, {}, True, id="unclean"),
        pytest.param({"hostPath": {"path": "/dev"}}, {"subPath": "null"}, False, id="a subPath"),
        pytest.param(
            {"hostPath": {"path": "/dev/null"}},
            {"subPathExpr": "$(EMPTY)"},
            True,
            id="a subPathExpr expanded to nothing",
        ),
        pytest.param({"emptyDir": {}}, {}, False, id="an emptyDir"),
        pytest.param({"hostPath": {"path": "/dev/zero"}}, {}, False, id="another device"),
        pytest.param(
            {"hostPath": {"path": "/run/nvidia/driver/dev/null"}}, {}, False, id="the driver's"
        ),
        pytest.param(
            {"hostPath": {"path": "/dev/null"}},
            {"mountPath": "/run/nvidia-container-devices/all"},
            False,
            id="at /run",
        ),
    ],
)
def test_only_the_hosts_dev_null_in_the_device_list_is_access(
    volume: dict[str, Any], mount: dict[str, Any], found: bool
) -> None:
    body, spec = _mounted(volume, **mount)
    body["env"] = [{"name": "EMPTY", "value": ""}]
    assert bool(mount_access(body, spec)) is found


def test_a_char_device_dev_null_in_the_device_list_is_said_once() -> None:
    body, spec = _mounted({"hostPath": {"path": "/dev/null", "type": "CharDevice"}})
    (access,) = mount_access(body, spec)
    assert "every GPU of its node" in access.what


def test_a_destination_is_read_once_of_the_dev_null_mounts_as_the_toolkit_does() -> None:
    body = {
        "name": "c",
        "volumeMounts": [
            {"name": "file", "mountPath": "/var/run/nvidia-container-devices/all"},
            {"name": "null", "mountPath": "/var/run/nvidia-container-devices//all"},
            {"name": "null", "mountPath": "/var/run/nvidia-container-devices/all/"},
        ],
    }
    paths = {"file": {"path": "/etc/hostname"}, "null": {"path": "/dev/null"}}
    found = [(m.volume, m.null) for m in device_list_mounts(body, paths, {})]
    assert found == [("file", False), ("null", True)]


def _go_clean(path: str) -> str:
    """Go's ``filepath.Clean`` on Linux (src/path/filepath/path.go), step by step: the
    reference the toolkit's ``requestsFromMounts`` runs."""
    if path == "":
        return "."
    rooted = path.startswith("/")
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not rooted:
                out.append("..")
            continue
        out.append(part)
    cleaned = "/".join(out)
    return ("/" + cleaned) if rooted else (cleaned or ".")


def _toolkit_requests(mounts: list[tuple[str, str]]) -> list[str]:
    """nvidia-container-toolkit internal/config/image/cuda_image.go ``requestsFromMounts``,
    transcribed: (source, destination) pairs to the device list."""
    root = _go_clean("/var/run/nvidia-container-devices")
    seen: set[str] = set()
    devices = []
    for source, target in mounts:
        if _go_clean(source) != "/dev/null":
            continue
        destination = _go_clean(target)
        if destination in seen:
            continue
        seen.add(destination)
        if not destination.startswith(root):
            continue
        device = destination[len(root) :].strip("/")
        if device:
            devices.append(device)
    return devices


_SEGMENTS = st.sampled_from(
    [
        "",
        ".",
        "..",
        "var",
        "run",
        "nvidia-container-devices",
        "nvidia-container-devicesall",
        "all",
        "0",
        "cdi",
        "imex",
        "dev",
        "null",
        "x",
    ]
)
_PATHS = st.lists(_SEGMENTS, max_size=7).map(lambda parts: "/" + "/".join(parts)) | st.sampled_from(
    ["/dev/null", "/var/run/nvidia-container-devices/all", "//dev//null/"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_PATHS, _PATHS), max_size=4))
def test_the_device_list_read_from_a_pods_host_paths_is_the_toolkits(
    mounts: list[tuple[str, str]],
) -> None:
    body = {
        "name": "c",
        "volumeMounts": [
            {"name": f"v{i}", "mountPath": destination} for i, (_, destination) in enumerate(mounts)
        ],
    }
    paths = {f"v{i}": {"path": source} for i, (source, _) in enumerate(mounts)}
    read = [m.request for m in device_list_mounts(body, paths, {}) if m.null]
    assert read == _toolkit_requests(mounts)
    spec = {"volumes": [{"name": name, "hostPath": path} for name, path in paths.items()]}
    found = [a for a in mount_access(body, spec) if a.short.startswith("/dev/null mounted")]
    assert len(found) == len(read)


@pytest.mark.parametrize(
    ("no_gpu", "asks"),
    [
        pytest.param(False, True, id="a claim that may give a GPU"),
        pytest.param(True, False, id="claims that give none (a NIC's)"),
    ],
)
def test_a_claim_asks_for_a_gpu_unless_the_inventory_shows_it_gives_none(
    no_gpu: bool, asks: bool
) -> None:
    spec = {"containers": [{"name": "c", "resources": {"claims": [{"name": "nic"}]}}]}
    (container,) = pod_gpus(spec, GPUResources()).containers
    container.claims_no_gpu = no_gpu
    assert asks_for_gpu(container) is asks
