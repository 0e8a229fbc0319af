"""UPDATEs through real gunicorn over TLS, on the recorded bodies of
tests/admission/test_service_updates.py: ``kubectl debug`` at /mutate gets its patch, and
a pending CPU pod that gains the GPU toleration is refused at /validate."""

from __future__ import annotations

import base64
import json

import pytest

from tests.admission.test_service_updates import debug_review, label_update, toleration_update
from tests.builders import INVENTORY, RULES
from tests.running import Server, post
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("updates")
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
    running = Server(tmp=tmp, cert_dir=tmp, rules=RULES, inventory=INVENTORY, workers=1)
    yield running
    Server.close_clients()
    assert running.stop() == 0, running.log.read_text()


def test_kubectl_debug_with_a_cuda_image_is_answered_with_a_patch_hiding_its_gpus(server):
    cuda = {"name": "debugger-x7k2p", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}

    status, body = post(server.connection(), "/mutate", debug_review(label_update(), cuda))

    response = body["response"]
    ops = json.loads(base64.b64decode(response["patch"]))
    assert status == 200
    assert response["allowed"] is True
    assert [op["path"] for op in ops] == ["/spec/ephemeralContainers/0/env"]


def test_a_pending_cpu_pod_gaining_the_gpu_toleration_is_refused_at_validate(server):
    status, body = post(server.connection(), "/validate", toleration_update(privileged=True))

    assert status == 200
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 403
    assert "gpuAccessWithoutRequest" in body["response"]["status"]["message"]
