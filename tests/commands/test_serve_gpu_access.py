"""GPU access control served for real: gunicorn over TLS with the shipped rules, and with
the check set to warn, answering reviews of pods that reach GPUs without a request."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import INVENTORY, RULES, patched, review
from tests.running import Server, post
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

TOLERATES_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def cuda_pod(env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A CUDA-image pod that requests no GPU but tolerates the GPU taint."""
    container: dict[str, Any] = {
        "name": "jupyter",
        "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
    }
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "notebook", "namespace": "research"},
        "spec": {"containers": [container], "tolerations": copy.deepcopy(TOLERATES_GPU)},
    }


SETS_ALL = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


def start(tmp: Path, rules: Path) -> Server:
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=1), tmp)
    return Server(tmp=tmp, cert_dir=tmp, rules=rules, inventory=INVENTORY)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("shipped"), RULES)
    yield server
    assert server.stop() == 0, server.log.read_text()


@pytest.fixture(scope="module")
def warning(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("warn")
    rules = tmp / "rules"
    shutil.copytree(RULES, rules)
    settings = rules / "00-settings.yaml"
    text = settings.read_text()
    assert "gpuAccessWithoutRequest: deny" in text
    settings.write_text(
        text.replace("gpuAccessWithoutRequest: deny", "gpuAccessWithoutRequest: warn")
    )
    server = start(tmp, rules)
    yield server
    assert server.stop() == 0, server.log.read_text()


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_a_cuda_pod_that_sets_visible_devices_without_a_gpu_request_is_denied(
    shipped: Server, endpoint: str
) -> None:
    status, answer = post(shipped.connection(), endpoint, review(cuda_pod(SETS_ALL)))

    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "[builtin/gpuAccessWithoutRequest]" in message
    assert 'container "jupyter" asks for no GPU but sets NVIDIA_VISIBLE_DEVICES=all' in message
    assert "Request a GPU in its resources.limits" in message
    assert "patch" not in response
    assert response["warnings"] == [
        "builtin/nonGPUPodOnGPUNode: pod asks for no GPU but tolerates GPU taint "
        "nvidia.com/gpu=present"
    ]


def test_with_warn_the_same_pod_is_allowed_with_a_warning(warning: Server) -> None:
    status, answer = post(warning.connection(), "/mutate", review(cuda_pod(SETS_ALL)))

    assert status == 200
    response = answer["response"]
    assert response["allowed"] is True
    assert response["warnings"][0] == (
        'builtin/gpuAccessWithoutRequest: container "jupyter" reaches GPUs without a GPU '
        "request: NVIDIA_VISIBLE_DEVICES=all"
    )
    # The container set the variable itself: judged, never overwritten.
    assert patched(cuda_pod(SETS_ALL), response) == cuda_pod(SETS_ALL)


def test_a_cuda_pod_without_the_variable_gets_gpus_hidden_once(shipped: Server) -> None:
    conn = shipped.connection()
    original = cuda_pod()

    _, answer = post(conn, "/mutate", review(original))
    response = answer["response"]
    mutated = patched(original, response)
    _, again = post(conn, "/mutate", review(mutated))

    assert response["allowed"] is True
    assert mutated["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": ""},
    ]
    assert again["response"]["allowed"] is True
    assert "patch" not in again["response"], "the mutation is applied once"
