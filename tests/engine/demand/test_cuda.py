"""What CUDA a container needs, and whether a node's driver has it, as NVIDIA's rules say."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.demand.cuda import (
    CudaNeed,
    DriverFacts,
    Verdict,
    container_needs,
    parse_requirement,
)
from webhook.engine.resources.cudatable import CudaImages
from webhook.files.cudaimages import cuda_table

IMAGES = CudaImages.of(cuda_table(), [{"image": "registry.corp/ml/*", "cuda": "12.6"}])
# The start of nvidia/cuda 12.2.2's NVIDIA_REQUIRE_CUDA (gitlab.com/nvidia/container-images/cuda
# dist/12.2.2/ubuntu2204/runtime/Dockerfile).
CUDA_12_2_IMAGE_ENV = (
    "cuda>=12.2 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=tesla,driver>=525,driver<526"
)


def _node(cuda: str, driver: str) -> DriverFacts:
    major, minor = cuda.split(".")
    d = driver.split(".")
    return DriverFacts.of(
        {
            "nvidia.com/cuda.runtime.major": major,
            "nvidia.com/cuda.runtime.minor": minor,
            "nvidia.com/cuda.driver.major": d[0],
            "nvidia.com/cuda.driver.minor": d[1],
            "nvidia.com/cuda.driver.rev": d[2] if len(d) > 2 else "",
        }
    )


def _container(image: str, **env: str) -> tuple[str, dict[str, Any]]:
    return "main", {"image": image, "env": [{"name": k, "value": v} for k, v in env.items()]}


def _verdict(image: str, node: DriverFacts, **env: str) -> Verdict | None:
    needs = container_needs([_container(image, **env)], IMAGES)
    return needs[0].verdict(node) if needs else None


H100_550 = _node("12.4", "550.90.07")
T4_520 = _node("11.8", "520.61.05")
T4_470 = _node("11.4", "470.256.02")
L4_535 = _node("12.2", "535.183.01")


@pytest.mark.parametrize(
    ("image", "env", "node", "verdict"),
    [
        pytest.param("nvidia/cuda:12.2.2-base-ubuntu22.04", {}, H100_550, "ok", id="newer-driver"),
        pytest.param(
            "nvidia/cuda:12.6.3-base-ubuntu24.04",
            {},
            L4_535,
            "possible",
            id="minor-version-compatibility-within-12",
        ),
        pytest.param(
            "nvidia/cuda:12.2.2-base-ubuntu22.04",
            {},
            T4_470,
            "possible",
            id="forward-compatibility-on-a-listed-branch",
        ),
        pytest.param(
            "nvidia/cuda:12.2.2-base-ubuntu22.04", {}, T4_520, "too-old", id="unlisted-older-branch"
        ),
        pytest.param(
            "nvcr.io/nvidia/tritonserver:24.04-py3",
            {},
            T4_520,
            "too-old",
            id="triton-24-04-not-forward-compatible-with-r520",
        ),
        pytest.param(
            "nvcr.io/nvidia/tritonserver:24.04-py3",
            {},
            _node("11.4", "470.57.02"),
            "possible",
            id="triton-24-04-on-r470-data-center",
        ),
        pytest.param(
            "nvcr.io/nvidia/pytorch:25.12-py3",
            {},
            H100_550,
            "unknown",
            id="release-without-listed-branches-is-never-too-old",
        ),
        pytest.param("registry.corp/ml/train:7", {}, T4_520, "too-old", id="rule-file-mapping"),
        pytest.param(
            "unknown/image:1",
            {"NVIDIA_REQUIRE_CUDA": "cuda>=12.6"},
            H100_550,
            "too-old",
            id="explicit-requirement-as-the-toolkit-checks",
        ),
        pytest.param(
            "unknown/image:1",
            {"NVIDIA_REQUIRE_CUDA": CUDA_12_2_IMAGE_ENV},
            T4_470,
            "unknown",
            id="brand-clause-with-matching-driver-is-unknown",
        ),
        pytest.param(
            "unknown/image:1",
            {"NVIDIA_REQUIRE_CUDA": CUDA_12_2_IMAGE_ENV},
            T4_520,
            "too-old",
            id="brand-clauses-for-other-branches-fail-on-their-driver-term",
        ),
        pytest.param(
            "unknown/image:1",
            {"NVIDIA_REQUIRE_CUDA": "cuda>=12.6", "NVIDIA_DISABLE_REQUIRE": "true"},
            T4_520,
            None,
            id="disable-require-skips-the-check",
        ),
        pytest.param(
            "nvidia/cuda:12.2.2-base-ubuntu22.04",
            {"NVIDIA_REQUIRE_CUDA": "cuda>=11.0"},
            T4_520,
            "ok",
            id="the-pods-variable-replaces-the-images",
        ),
        pytest.param("unknown/image:1", {}, T4_520, None, id="unknown-image-no-need"),
        pytest.param("nvidia/cuda:latest", {}, T4_520, None, id="a-tag-without-version"),
    ],
)
def test_a_containers_need_is_judged_against_a_nodes_driver(
    image: str, env: dict[str, str], node: DriverFacts, verdict: Verdict | None
) -> None:
    assert _verdict(image, node, **env) == verdict


def test_a_node_without_labels_is_unknown() -> None:
    need = CudaNeed("main", "x", requirements=(("x", parse_requirement("cuda>=13.0")),))
    assert need.verdict(DriverFacts.of({})) == "unknown"


def test_the_newer_label_names_are_read_first() -> None:
    facts = DriverFacts.of(
        {
            "nvidia.com/cuda.runtime-version.major": "12",
            "nvidia.com/cuda.runtime-version.minor": "8",
            "nvidia.com/cuda.runtime.major": "12",
            "nvidia.com/cuda.runtime.minor": "4",
            "nvidia.com/cuda.driver-version.full": "570.124.06",
        }
    )
    assert facts.cuda == (12, 8)
    assert facts.driver == (570, 124, 6)
    assert facts.describe() == "driver 570.124.06 (CUDA 12.8)"


def test_a_requirement_from_a_config_map_is_not_guessed() -> None:
    container = (
        "main",
        {
            "image": "nvidia/cuda:12.2.2-base-ubuntu22.04",
            "env": [{"name": "NVIDIA_REQUIRE_CUDA", "valueFrom": {"configMapKeyRef": {}}}],
        },
    )
    assert container_needs([container], IMAGES) == []


def test_requirements_parse_as_the_toolkit_splits_them() -> None:
    parsed = parse_requirement("cuda>=12.2 brand=tesla,driver>=470,driver<471 arch=x86 foo=bar")
    assert [[(c.prop, c.op, c.value) for c in term] for term in parsed] == [
        [("cuda", ">=", "12.2")],
        [("brand", "=", "tesla"), ("driver", ">=", "470"), ("driver", "<", "471")],
        [("arch", "=", "x86")],
    ]
