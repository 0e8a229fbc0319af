"""CEL device selectors behave as in Kubernetes' DRA environment
(``k8s.io/dynamic-resource-allocation/cel/compile.go``), on devices read from v1 JSON."""

from __future__ import annotations

import pytest

from webhook.engine.resources.devices import device_from_json
from webhook.engine.resources.deviceselectors import (
    Selector,
    SelectorError,
    Version,
    compile_selector,
)

H100 = device_from_json(
    {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "570.124.6"},
            "index": {"int": 0},
            "mig": {"bool": False},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    },
    driver="gpu.nvidia.com",
    pool="node-a",
).view()


def matches(expression: str) -> bool:
    selector = compile_selector(expression)
    assert isinstance(selector, Selector), selector
    return selector.matches(H100)


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        pytest.param('device.driver == "gpu.nvidia.com"', True, id="driver"),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].type == 'gpu'", True, id="bare-name-is-the-drivers"
        ),
        pytest.param(
            "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'",
            True,
            id="qualified-name-has-its-own-domain",
        ),
        pytest.param(
            "'productName' in device.attributes['other.example.com']",
            False,
            id="unknown-domain-is-an-empty-map",
        ),
        pytest.param("device.attributes['gpu.nvidia.com'].index == 0", True, id="int"),
        pytest.param("!device.attributes['gpu.nvidia.com'].mig", True, id="bool"),
        pytest.param(
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0",
            True,
            id="quantity-compareTo",
        ),
        pytest.param(
            "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40G'))",
            True,
            id="quantity-isGreaterThan",
        ),
        pytest.param(
            "device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('80000Mi'))",
            False,
            id="quantity-isLessThan",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.9.0'))",
            True,
            id="version-isGreaterThan",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].driverVersion.major() >= 570",
            True,
            id="version-major",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
            True,
            id="string-function",
        ),
    ],
)
def test_selectors_see_the_device_as_kubernetes_shows_it(expression: str, want: bool) -> None:
    assert matches(expression) is want


def test_a_missing_attribute_is_a_runtime_error_as_in_the_allocator() -> None:
    selector = compile_selector("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
    assert isinstance(selector, Selector)
    with pytest.raises(SelectorError) as raised:
        selector.matches(H100)
    assert not raised.value.unsupported


def test_an_expression_that_does_not_parse_is_an_error_not_a_crash() -> None:
    compiled = compile_selector("device.driver == ")
    assert isinstance(compiled, SelectorError)
    assert "does not compile" in str(compiled)
    assert not compiled.unsupported


def test_a_function_this_library_lacks_is_unsupported_not_a_mismatch() -> None:
    selector = compile_selector("isCIDR('10.0.0.0/8')")
    assert isinstance(selector, Selector)
    with pytest.raises(SelectorError) as raised:
        selector.matches(H100)
    assert raised.value.unsupported


def test_each_expression_is_compiled_once() -> None:
    text = "device.driver == 'compiled-once.example.com'"
    assert compile_selector(text) is compile_selector(text)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        pytest.param("1.2.3", "1.10.0", id="numeric-not-lexical"),
        pytest.param("1.0.0-rc.1", "1.0.0", id="release-after-prerelease"),
        pytest.param("1.0.0-alpha", "1.0.0-beta", id="prerelease-order"),
    ],
)
def test_versions_order_as_semver(older: str, newer: str) -> None:
    assert Version(older).key() < Version(newer).key()
