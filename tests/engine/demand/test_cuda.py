"""What CUDA a container needs, and whether a node's driver has it, as NVIDIA's rules say."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.demand.cuda import (
    CudaNeed,
    DriverFacts,
    Verdict,
    container_needs,
    cuda_unknowns,
    parse_requirement,
)
from webhook.engine.resources.cudatable import CudaImages
from webhook.files.shipped import cuda_table

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
T4_460 = _node("11.2", "460.106.00")  # a branch no image lists as forward compatible
H100_570 = _node("12.8", "570.124.06")
H100_560 = _node("12.6", "560.35.03")
T4_440 = _node("10.2", "440.118.02")


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
        pytest.param("registry.corp/ml/train:7", {}, T4_460, "too-old", id="rule-file-mapping"),
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
        pytest.param(
            "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
            {},
            T4_460,
            "too-old",
            id="cudnn-runtime-tag-says-12-4",
        ),
        pytest.param(
            "nvidia/cuda:12.4.1-devel-ubuntu22.04", {}, L4_535, "possible", id="devel-tag"
        ),
        pytest.param("nvidia/cuda:12.4.1-base-ubi9", {}, H100_550, "ok", id="ubi-tag"),
        pytest.param(
            "nvidia/cuda:12.6.3-runtime-rockylinux9", {}, T4_460, "too-old", id="rockylinux-tag"
        ),
        pytest.param(
            "nvcr.io/nvidia/cuda:12.6.3-base-ubuntu24.04", {}, T4_460, "too-old", id="nvcr-cuda"
        ),
        pytest.param(
            "docker.io/nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04",
            {},
            T4_470,
            "possible",
            id="docker-io-cuda-11-8-on-470-by-minor-version-compatibility",
        ),
        pytest.param(
            "nvcr.io/nvidia/tritonserver:24.08-py3",
            {},
            L4_535,
            "possible",
            id="triton-24-08-cuda-12-6-on-535-minor-version",
        ),
        pytest.param(
            "nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3",
            {},
            T4_520,
            None,
            id="a-variant-the-notes-do-not-describe-is-unknown",
        ),
        pytest.param(
            "nvcr.io/nvidia/tritonserver:25.08-py3",
            {},
            H100_570,
            "unknown",
            id="triton-25-08-cuda-13-branches-not-read-so-never-too-old",
        ),
        pytest.param(
            "nvcr.io/nvidia/tritonserver:25.01-py3",
            {},
            T4_520,
            "too-old",
            id="triton-25-01-cuda-12-8-on-unlisted-r520",
        ),
        pytest.param(
            "nvcr.io/nvidia/tensorflow:23.01-tf2-py3",
            {},
            T4_470,
            "possible",
            id="tensorflow-23-01-on-r470",
        ),
        pytest.param(
            "nvcr.io/nvidia/mxnet:24.05-py3", {}, T4_520, "too-old", id="mxnet-24-05-on-r520"
        ),
        pytest.param(
            "nvidia/cuda:12.0.1-base-ubuntu22.04",
            {},
            T4_520,
            "possible",
            id="cuda-12-0-images-list-r520",
        ),
        pytest.param(
            "nvidia/cuda:13.0.2-base-ubuntu24.04",
            {},
            H100_570,
            "possible",
            id="cuda-13-0-images-list-r570",
        ),
        pytest.param(
            "nvidia/cuda:13.0.2-base-ubuntu24.04",
            {},
            H100_560,
            "too-old",
            id="cuda-13-0-images-do-not-list-r560",
        ),
        pytest.param(
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
            {},
            T4_520,
            "possible",
            id="an-unlisted-version-gets-every-branch-of-its-major",
        ),
        pytest.param(
            "nvidia/cuda:11.8.0-base-ubuntu22.04",
            {},
            T4_440,
            "unknown",
            id="a-major-without-lists-calls-no-older-driver-too-old",
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
    ((why, need),) = cuda_unknowns([container], IMAGES)
    assert "NVIDIA_REQUIRE_CUDA is set by valueFrom" in why
    assert need.wanted == "CUDA 12.2.2"


def test_requirements_parse_as_the_toolkit_splits_them() -> None:
    parsed = parse_requirement("cuda>=12.2 brand=tesla,driver>=470,driver<471 arch=x86 foo=bar")
    assert [[(c.prop, c.op, c.value) for c in term] for term in parsed] == [
        [("cuda", ">=", "12.2")],
        [("brand", "=", "tesla"), ("driver", ">=", "470"), ("driver", "<", "471")],
        [("arch", "=", "x86")],
    ]


def _from(*sources: dict[str, Any], **env: str) -> tuple[str, dict[str, Any]]:
    name, body = _container("nvidia/cuda:12.6.3-base-ubuntu24.04", **env)
    return name, {**body, "envFrom": list(sources)}


CONFIG_MAP = {"configMapRef": {"name": "cuda-env"}}


@pytest.mark.parametrize(
    ("container", "needs", "unknown"),
    [
        pytest.param(_from(CONFIG_MAP), [], 1, id="envfrom-may-set-the-requirement"),
        pytest.param(
            _from({"secretRef": {"name": "s"}, "prefix": "NVIDIA_"}),
            [],
            1,
            id="a-prefix-that-can-begin-the-name",
        ),
        pytest.param(
            _from({"configMapRef": {"name": "app"}, "prefix": "APP_"}),
            ["CUDA 12.6.3"],
            0,
            id="a-prefix-that-cannot-begin-it-is-no-doubt",
        ),
        pytest.param(
            _from(CONFIG_MAP, NVIDIA_REQUIRE_CUDA="cuda>=12.8", NVIDIA_DISABLE_REQUIRE="false"),
            ["NVIDIA_REQUIRE_CUDA=cuda>=12.8"],
            0,
            id="explicit-env-wins-over-envfrom",
        ),
        pytest.param(
            _from(CONFIG_MAP, NVIDIA_REQUIRE_CUDA="cuda>=12.8"),
            [],
            1,
            id="envfrom-may-still-disable-the-explicit-requirement",
        ),
        pytest.param(
            _from(CONFIG_MAP, NVIDIA_DISABLE_REQUIRE="true"),
            ["CUDA 12.6.3"],
            0,
            id="disabled-explicitly-leaves-the-image",
        ),
    ],
)
def test_env_from_makes_the_requirement_unknowable_unless_env_says_it(
    container: tuple[str, dict[str, Any]], needs: list[str], unknown: int
) -> None:
    assert [n.wanted for n in container_needs([container], IMAGES)] == needs
    unknowns = cuda_unknowns([container], IMAGES)
    assert len(unknowns) == unknown
    for why, need in unknowns:
        assert "envFrom" in why
        assert need.wanted == "CUDA 12.6.3"


def test_env_from_on_an_image_the_tables_do_not_know_says_nothing() -> None:
    container = ("main", {"image": "unknown/image:1", "envFrom": [CONFIG_MAP]})
    assert container_needs([container], IMAGES) == []
    assert cuda_unknowns([container], IMAGES) == []


def test_every_release_row_cites_nvidias_notes_and_parses() -> None:
    table = cuda_table()
    rows = table["releases"]
    assert len(rows) >= 12
    for row in rows:
        assert str(row["source"]).startswith("https://docs.nvidia.com/"), row
        image = f"{row['repository']}:{row['release']}{(row.get('tags') or ['-py3'])[0]}"
        found = IMAGES.lookup(image)
        assert found is not None, image
        assert found.source == row["source"], image
