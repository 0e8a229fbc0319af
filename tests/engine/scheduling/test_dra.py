"""Which extended resources are GPUs once DRA serves them, and which nodes DRA gives GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.engine.demand.gpuaccess import asks_for_gpu
from webhook.engine.demand.gpus import pod_gpus
from webhook.engine.policy.ruleset import DEFAULT_GPU_DEVICE_CLASSES, GPUResources, glob_matcher
from webhook.engine.resources.devices import DeviceInventory, SubRequest, claim_from_json
from webhook.engine.resources.inventory import Node
from webhook.engine.scheduling.dra import (
    NO_CLAIMS,
    PodClaim,
    class_gives_gpu,
    container_claim_gpus,
    device_counts,
    extended_resource_claims,
    gpu_class_matcher,
    gpu_devices,
    pod_claims,
    served_gpu_resources,
    with_claim_gpus,
)
from webhook.files.inventoryfile import load_inventory_file

INVENTORIES = Path(__file__).resolve().parents[2] / "cases" / "_inventories"
DEVICES = load_inventory_file(str(INVENTORIES / "dra-driver-only.yaml")).view().devices
assert DEVICES is not None
GPU_CLASSES = glob_matcher(DEFAULT_GPU_DEVICE_CLASSES)
POLICY = GPUResources()


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        pytest.param("deviceclass.resource.kubernetes.io/gpu.nvidia.com", True, id="implicit"),
        pytest.param("deviceclass.resource.kubernetes.io/mig.nvidia.com", True, id="MIG class"),
        pytest.param("nvidia.com/gpu", True, id="extendedResourceName"),
        pytest.param("deviceclass.resource.kubernetes.io/multinic", False, id="a NIC class"),
        pytest.param("deviceclass.resource.kubernetes.io/nosuch", False, id="no such class"),
        pytest.param("example.com/fpga", False, id="served by nothing"),
    ],
)
def test_a_name_a_gpu_device_class_serves_is_a_gpu_resource(name: str, gpu: bool) -> None:
    resources = served_gpu_resources(POLICY, devices=DEVICES, is_gpu_class=GPU_CLASSES)
    assert resources.is_gpu(name) is gpu


def test_the_policys_own_resources_stay_as_they_are() -> None:
    resources = served_gpu_resources(POLICY, devices=DEVICES, is_gpu_class=GPU_CLASSES)
    assert resources.is_shared("nvidia.com/gpu.shared")
    assert resources is served_gpu_resources(POLICY, devices=DEVICES, is_gpu_class=GPU_CLASSES)
    assert served_gpu_resources(POLICY, devices=None, is_gpu_class=GPU_CLASSES) is POLICY


@pytest.mark.parametrize(
    ("node", "gpus"),
    [
        pytest.param("dra-h100-0", True, id="NVIDIA's driver publishes two H100s"),
        pytest.param("nic-0", False, id="dranet's network interfaces"),
        pytest.param("cpu-0", False, id="no slice"),
    ],
)
def test_a_node_serves_gpus_when_a_gpu_class_selects_one_of_its_devices(
    node: str, gpus: bool
) -> None:
    assert gpu_devices(DEVICES, GPU_CLASSES).holds(Node(name=node)) is gpus


MIG_DEMO = load_inventory_file(str(INVENTORIES / "dra-gh200-mig-1g12gb.yaml")).view().devices
assert MIG_DEMO is not None


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        pytest.param(
            "deviceclass.resource.kubernetes.io/mig-1g-12gb.gpu.nvidia.com",
            True,
            id="a class serving a GPU resource (NVIDIA's per-profile class)",
        ),
        pytest.param(
            "deviceclass.resource.kubernetes.io/mig.nvidia.com",
            False,
            id="a class named nowhere and serving no GPU resource",
        ),
    ],
)
def test_a_class_whose_extended_resource_is_a_gpu_is_a_gpu_class_under_any_name(
    name: str, gpu: bool
) -> None:
    nothing = glob_matcher([])
    resources = served_gpu_resources(POLICY, devices=MIG_DEMO, is_gpu_class=nothing)
    assert resources.is_gpu(name) is gpu
    is_gpu_class = gpu_class_matcher(MIG_DEMO, is_gpu_class=nothing, resources=POLICY)
    assert is_gpu_class(name.rpartition("/")[2]) is gpu


def _container(name: str, gpus: int, **extra: object) -> dict[str, object]:
    return {"name": name, "resources": {"limits": {"nvidia.com/gpu": gpus}}, **extra}


@pytest.mark.parametrize(
    ("spec", "counts"),
    [
        pytest.param(
            {"containers": [_container("a", 1), _container("b", 1)]},
            {"container-0": 1, "container-1": 1},
            id="a request per app container",
        ),
        pytest.param(
            {"initContainers": [_container("init", 4)], "containers": [_container("a", 2)]},
            {"container-0": 2, "container-1": 2},
            id="an init container reuses the app container's and asks for the rest",
        ),
        pytest.param(
            {"initContainers": [_container("init", 1)], "containers": [_container("a", 2)]},
            {"container-1": 2},
            id="an init container within what the app containers ask",
        ),
        pytest.param(
            {
                "initContainers": [
                    _container("sidecar", 1, restartPolicy="Always"),
                    _container("init", 3),
                ],
                "containers": [_container("a", 1)],
            },
            {"container-0": 1, "container-1": 2, "container-2": 1},
            id="a sidecar is long-lived; the init after it reuses only what comes later",
        ),
    ],
)
def test_the_schedulers_claim_for_a_served_resource_has_its_requests_per_container(
    spec: dict[str, object], counts: dict[str, int]
) -> None:
    """createRequestsAndMappings: per long-lived container, and the most an init container
    needs beyond the long-lived containers after it; together the effective request."""
    pod = pod_gpus(spec, POLICY)
    _, claims = extended_resource_claims(pod, NO_CLAIMS, devices=DEVICES)
    (served,) = claims.claims
    assert served.claim is not None
    got = {
        r.name.removesuffix("-nvidia.com/gpu"): r.alternatives[0].count
        for r in served.claim.spec.requests
    }
    assert got == counts
    assert served.gpu_count == sum(counts.values()) == pod.effective["nvidia.com/gpu"]


def test_devices_a_selector_cannot_be_evaluated_on_are_counted_as_unknown() -> None:
    # For explain's per-node answer: neither usable nor excluded, so no node is refused
    # for want of devices the webhook could not judge.
    full = load_inventory_file(str(INVENTORIES / "dra.yaml")).view().devices
    assert full is not None
    node = Node(name="dra-h100-0", labels={"kubernetes.io/hostname": "dra-h100-0"})
    profile = full.profile(node)
    plain = SubRequest(name="gpu", device_class="gpu.nvidia.com")
    bound = SubRequest(
        name="gpu",
        device_class="gpu.nvidia.com",
        selectors=("cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu')",),
    )
    known = device_counts(plain, (profile,), full)
    unsure = device_counts(bound, (profile,), full)
    assert known.usable == 8
    assert known.unknown == 0
    assert unsure.usable == 0
    assert unsure.unknown == 8


# --- the GPUs one container holds through the claims it names --------------------------


def _exactly(name: str, device_class: str = "gpu.nvidia.com", **more: object) -> dict[str, object]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **more}}


def _pod_claim(name: str, *requests: dict[str, object]) -> PodClaim:
    raw = {
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"devices": {"requests": list(requests)}},
    }
    return PodClaim(name, f"ResourceClaim {name}", claim_from_json(raw))


_FOUR_OR_TWO = {
    "name": "gpus",
    "firstAvailable": [
        {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4},
        {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
    ],
}
_GPU_AND_NICS = (_exactly("gpu"), _exactly("nics", "multinic", count=2))


@pytest.mark.parametrize(
    ("claims", "names", "counts", "exact", "unbounded"),
    [
        pytest.param(
            [_pod_claim("a", _exactly("gpus", count=3))],
            [{"name": "a"}],
            {3},
            3,
            False,
            id="exactly 3",
        ),
        pytest.param(
            [_pod_claim("a", *_GPU_AND_NICS)], [{"name": "a"}], {1}, 1, False, id="NICs never count"
        ),
        pytest.param(
            [_pod_claim("a", *_GPU_AND_NICS)],
            [{"name": "a", "request": "nics"}],
            {0},
            0,
            False,
            id="only the NIC request",
        ),
        pytest.param(
            [_pod_claim("a", _FOUR_OR_TWO)],
            [{"name": "a"}],
            {2, 4},
            None,
            False,
            id="firstAvailable",
        ),
        pytest.param(
            [_pod_claim("a", _FOUR_OR_TWO)],
            [{"name": "a", "request": "gpus/two"}],
            {2},
            2,
            False,
            id="one alternative named",
        ),
        pytest.param(
            [_pod_claim("a", _exactly("gpus", allocationMode="All"))],
            [{"name": "a"}],
            {1},
            None,
            True,
            id="All: at least one",
        ),
        pytest.param(
            [_pod_claim("a", _exactly("gpus", count=2, capacity={"requests": {"memory": "10Gi"}}))],
            [{"name": "a"}],
            {1, 2},
            None,
            False,
            id="consumable capacity shares",
        ),
        pytest.param(
            [PodClaim("a", "ResourceClaim a", None)],
            [{"name": "a"}],
            {0},
            None,
            True,
            id="not read",
        ),
        pytest.param(
            [_pod_claim("a", _exactly("gpus", count=2)), _pod_claim("b", _exactly("gpu"))],
            [{"name": "a"}, {"name": "b"}],
            {3},
            3,
            False,
            id="two claims add up",
        ),
        pytest.param(
            [_pod_claim("a", _exactly("gpus", count=2)), _pod_claim("b", _exactly("gpu"))],
            [{"name": "b"}],
            {1},
            1,
            False,
            id="a claim it does not name",
        ),
    ],
)
def test_a_container_holds_the_gpus_of_the_gpu_requests_it_names(
    claims: list[PodClaim],
    names: list[dict[str, str]],
    counts: set[int],
    exact: int | None,
    unbounded: bool,
) -> None:
    body = {"name": "main", "resources": {"claims": names}}
    held = container_claim_gpus(body, claims, is_gpu_class=GPU_CLASSES)
    assert (set(held.counts), held.exact, held.unbounded) == (counts, exact, unbounded)
    assert bool(held.unknown) == (exact is None)


def _class(name: str, *expressions: str) -> dict[str, object]:
    selectors = [{"cel": {"expression": e}} for e in expressions]
    return {"kind": "DeviceClass", "metadata": {"name": name}, "spec": {"selectors": selectors}}


WITH_MORE_CLASSES = DEVICES.with_classes(
    [
        _class("any-device"),
        _class("my-accelerators", "device.driver == 'gpu.nvidia.com'"),
        _class("rdma-nics", 'device.driver == "dra.net"', "device.attributes['dra.net'].rdma"),
        _class("unevaluable", "cel.bind(d, device.driver, d == 'dra.net')"),
    ]
)


@pytest.mark.parametrize(
    ("device_class", "gives"),
    [
        pytest.param("gpu.nvidia.com", True, id="a GPU class"),
        pytest.param("multinic", False, id="dranet's NICs: its selector rules out every GPU"),
        pytest.param("rdma-nics", False, id="NICs with a second selector"),
        pytest.param("any-device", True, id="no selector: any device, GPUs too"),
        pytest.param("my-accelerators", True, id="a class of another name selecting GPUs"),
        pytest.param("unevaluable", True, id="a selector not evaluated here rules out nothing"),
        pytest.param("nosuch.example.com", True, id="a class the inventory does not know"),
    ],
)
def test_a_class_gives_a_gpu_unless_its_selectors_rule_out_every_gpu_device(
    device_class: str, gives: bool
) -> None:
    assert class_gives_gpu(WITH_MORE_CLASSES, device_class, is_gpu_class=GPU_CLASSES) is gives


def test_every_class_may_give_a_gpu_while_the_devices_are_not_all_known() -> None:
    partial = DeviceInventory.of([_class("multinic", 'device.driver == "dra.net"')], complete=False)
    assert class_gives_gpu(partial, "multinic", is_gpu_class=GPU_CLASSES)


def _claim_template(name: str, *requests: dict[str, object]) -> dict[str, object]:
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


WITH_TEMPLATES = DEVICES.with_claims(
    [
        _claim_template("nic", _exactly("nic", "multinic")),
        _claim_template("gpu-and-nic", _exactly("gpu"), _exactly("nic", "multinic")),
        _claim_template(
            "gpu-or-nic",
            {
                "name": "either",
                "firstAvailable": [
                    {"name": "g", "deviceClassName": "gpu.nvidia.com"},
                    {"name": "n", "deviceClassName": "multinic"},
                ],
            },
        ),
    ]
)


@pytest.mark.parametrize(
    ("template", "entry", "no_gpu"),
    [
        pytest.param("nic", {}, True, id="a NIC claim"),
        pytest.param("gpu-and-nic", {"request": "nic"}, True, id="a claim's NIC request"),
        pytest.param("gpu-and-nic", {"request": "gpu"}, False, id="its GPU request"),
        pytest.param("gpu-and-nic", {}, False, id="the whole claim"),
        pytest.param("gpu-or-nic", {"request": "either/n"}, True, id="the NIC alternative"),
        pytest.param("gpu-or-nic", {"request": "either"}, False, id="either alternative"),
        pytest.param("made-elsewhere", {}, False, id="a template not in the inventory"),
    ],
)
def test_a_container_whose_claims_give_no_gpu_asks_for_none_through_them(
    template: str, entry: dict[str, str], no_gpu: bool
) -> None:
    spec = {
        "resourceClaims": [{"name": "c", "resourceClaimTemplateName": template}],
        "containers": [{"name": "app", "resources": {"claims": [{"name": "c", **entry}]}}],
    }
    claims = pod_claims(spec, namespace="team", devices=WITH_TEMPLATES, is_gpu_class=GPU_CLASSES)
    assert (("containers", 0) in claims.no_gpu) is no_gpu
    (container,) = with_claim_gpus(pod_gpus(spec, POLICY), claims).containers
    assert asks_for_gpu(container) is not no_gpu


def test_without_an_inventory_every_claim_is_a_gpu_request_as_before() -> None:
    spec = {
        "resourceClaims": [{"name": "c", "resourceClaimTemplateName": "nic"}],
        "containers": [{"name": "app", "resources": {"claims": [{"name": "c"}]}}],
    }
    claims = pod_claims(spec, namespace="team", devices=None, is_gpu_class=GPU_CLASSES)
    assert not claims.no_gpu
    (container,) = with_claim_gpus(pod_gpus(spec, POLICY), claims).containers
    assert asks_for_gpu(container)
