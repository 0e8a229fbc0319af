"""GPU access through the toolkit's volume-mount device list, and NIC claims that are no GPU
request (issue 41, items 3 and 4), through real gunicorn over TLS, two workers as deployed,
with the shipped rules and an inventory of GPUs and dranet's NICs: the recorded
AdmissionReview of a GPU pod, with a sidecar that mounts the host's /dev/null at
/var/run/nvidia-container-devices/all, is denied, as is a ``kubectl debug`` container that
does the same; a container whose only claim is a NIC's is judged and hidden as one that asks
for no GPU. Ordinary reviews are answered within a second by the same workers meanwhile, and
the pod stays under its memory limit."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.builders import CASES, FIXTURES, RULES, patched, pod, review
from tests.running import Server, post, reviews_answered
from tests.serving.test_memory import container_memory_limit, pod_rss
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

# Nodes with four H100s and dranet's NICs, and claim templates in namespace team (one-nic).
INVENTORY = CASES / "_inventories" / "dra-claim-containers.yaml"
RECORDED = FIXTURES / "pod-gpu-limits-mutate-Pod-CREATE.json"
DEVICE_LIST_ALL = "/var/run/nvidia-container-devices/all"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpuaccess")
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
    running = Server(tmp=tmp, cert_dir=tmp, rules=RULES, inventory=INVENTORY, workers=2)
    running.wait_for_fresh_workers(set(), 2)
    running.first_workers = set(running.workers())
    yield running
    Server.close_clients()
    assert running.stop() == 0, running.log.read_text()[-3000:]


def recorded() -> dict[str, Any]:
    """The AdmissionReview kube-apiserver sent for a pod with one GPU, as received."""
    body: dict[str, Any] = json.loads(RECORDED.read_text())
    return body


def with_null_mount(review_body: dict[str, Any]) -> dict[str, Any]:
    """The recorded pod with a log sidecar that mounts the host's /dev/null at .../all."""
    out = copy.deepcopy(review_body)
    spec = out["request"]["object"]["spec"]
    spec["volumes"].append({"name": "null-device", "hostPath": {"path": "/dev/null"}})
    spec["containers"].append(
        {
            "name": "logs",
            "image": "fluent/fluent-bit:3.1",
            "volumeMounts": [{"name": "null-device", "mountPath": DEVICE_LIST_ALL}],
        }
    )
    return out


def debugged(obj: dict[str, Any]) -> dict[str, Any]:
    """``kubectl debug`` of a running GPU pod: the whole Pod, old and new, on
    pods/ephemeralcontainers, the new debug container mounting the pod's /dev/null volume
    into the device list."""
    old = copy.deepcopy(obj)
    old["spec"]["nodeName"] = "dra-h100-0"
    old["spec"]["volumes"] = [{"name": "null-device", "hostPath": {"path": "/dev/null"}}]
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [
        {
            "name": "debugger-x7k2p",
            "image": "ubuntu:24.04",
            "targetContainerName": "main",
            "volumeMounts": [{"name": "null-device", "mountPath": DEVICE_LIST_ALL}],
        }
    ]
    return review(new, operation="UPDATE", old=old, sub_resource="ephemeralcontainers")


def nic_pod(env: list[dict[str, str]] | None) -> dict[str, Any]:
    """A pod in namespace team whose one container holds only dranet's NIC claim."""
    container: dict[str, Any] = {
        "name": "app",
        "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        "resources": {"claims": [{"name": "nic"}]},
    }
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "net", "namespace": "team"},
        "spec": {
            "resourceClaims": [{"name": "nic", "resourceClaimTemplateName": "one-nic"}],
            "containers": [container],
        },
    }


def in_team(body: dict[str, Any]) -> dict[str, Any]:
    body["request"]["namespace"] = "team"
    return body


def messages(answer: dict[str, Any]) -> str:
    return str(answer["response"].get("status", {}).get("message", ""))


def test_a_dev_null_mount_in_the_device_list_is_denied_in_a_sidecar_and_a_debug_container(
    server,
):
    conn = server.connection()

    status, answer = post(conn, "/mutate", recorded())
    assert status == 200
    assert answer["response"]["allowed"] is True

    status, answer = post(conn, "/mutate", with_null_mount(recorded()))
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert 'container "logs" asks for no GPU but mounts the host\'s /dev/null' in messages(answer)
    assert DEVICE_LIST_ALL in messages(answer)

    status, answer = post(conn, "/mutate", debugged(pod(gpus=1, name="train")))
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert 'container "debugger-x7k2p"' in messages(answer)

    assert reviews_answered(server, count=5, timeout=1.0) == [200] * 5
    assert set(server.workers()) == server.first_workers


def test_a_container_holding_only_a_nic_claim_is_judged_and_hidden_as_asking_for_no_gpu(server):
    conn = server.connection()

    all_gpus = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    status, answer = post(conn, "/mutate", in_team(review(nic_pod(all_gpus))))
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert 'container "app" asks for no GPU but sets NVIDIA_VISIBLE_DEVICES=all' in messages(answer)

    cuda = nic_pod(None)
    status, answer = post(conn, "/mutate", in_team(review(cuda)))
    assert status == 200
    assert answer["response"]["allowed"] is True
    (container,) = patched(copy.deepcopy(cuda), answer["response"])["spec"]["containers"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]

    assert reviews_answered(server, count=5, timeout=1.0) == [200] * 5
    assert set(server.workers()) == server.first_workers
    total, _ = pod_rss(server)
    assert total < container_memory_limit()
