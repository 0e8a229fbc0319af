"""``gpu-webhook serve`` for real: gunicorn, TLS on loopback, reviews from a real API server."""

import json
import re
import signal
import ssl
import time
import warnings

import pytest

from tests.builders import (
    CORPUS,
    FIXTURES,
    INVENTORY,
    RULES,
    deployment,
    patched,
    pod,
    review,
)
from tests.rulesets import quota
from tests.running import Load, Server, mount, post
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.review import MAX_BODY_BYTES, parse_review
from webhook.admission.service import AdmissionService
from webhook.cli import main
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.files.manifests import load_manifests
from webhook.files.rulefiles import RuleStore

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    Server.close_clients()


def write_dev_certs(directory):
    write(
        generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), directory
    )


def _cert_files(directory):
    write_dev_certs(directory)
    return {name: (directory / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    write_dev_certs(tmp / "certs")
    running = Server(tmp=tmp, cert_dir=tmp / "certs", rules=RULES, inventory=INVENTORY)
    yield running
    assert running.stop() == 0, running.log.read_text()


@pytest.fixture(scope="module")
def local():
    """The same rules and inventory, in this process: what the server must answer."""
    return AdmissionService(
        rules=RuleStore(str(RULES)), inventory=StaticInventorySource(str(INVENTORY))
    )


def test_recorded_reviews_over_one_kept_alive_connection_get_the_engines_answers(server, local):
    conn = server.connection()
    first_socket = None
    for path in sorted(FIXTURES.glob("*.json")):
        body = path.read_bytes()
        endpoint = "/mutate" if "-mutate-" in path.name else "/validate"

        status, answer = post(conn, endpoint, body)

        expected = local.review(parse_review(body), mutate=endpoint == "/mutate").body
        assert status == 200
        assert answer == expected, path.name
        assert answer["response"]["uid"] == json.loads(body)["request"]["uid"]
        first_socket = first_socket or conn.sock
        assert conn.sock is first_socket, "the server closed a kept-alive connection"
    assert conn.sock.version() == "TLSv1.3"


def _corpus_objects():
    documents, _ = load_manifests([str(CORPUS)])
    return [d.obj for d in documents if isinstance(d.obj.get("kind"), str)]


def test_reviews_built_from_the_corpus_get_the_engines_decision_and_a_patch_that_applies(
    server, local
):
    objects = _corpus_objects()
    assert len(objects) > 100, f"the corpus at {CORPUS} is missing or nearly empty"
    conn = server.connection()
    policy = local.rules.current.policy
    inventory = InventoryView(local.inventory.snapshot())
    for obj in objects:
        body = review(obj)
        request = body["request"]
        engine = evaluate(
            Request(obj, namespace=request["namespace"]), policy=policy, inventory=inventory
        )

        _, mutated = post(conn, "/mutate", body)
        _, validated = post(conn, "/validate", {**body, "request": {**request, "uid": "v"}})

        name = f"{obj['kind']} {request['name']}"
        for answer in (mutated["response"], validated["response"]):
            assert answer["allowed"] is engine.allowed, name
            assert answer.get("warnings", []) == list(engine.warnings), name
        assert mutated["response"]["uid"] == request["uid"]
        assert "patch" not in validated["response"]
        if engine.allowed and engine.understood:
            assert patched(obj, mutated["response"]) == engine.mutated, name


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(gpus=2), id="gpu-pod"),
        pytest.param(pod(gpus=1, requests_only=True), id="requests-only"),
        pytest.param(deployment(pod(gpus=8), replicas=9), id="over-cluster"),
    ],
)
def test_a_dry_run_gets_byte_for_byte_the_answer_of_the_real_request(server, obj, endpoint):
    conn = server.connection()

    real = post(conn, endpoint, review(obj, uid="one"))
    dry = post(conn, endpoint, review(obj, uid="one", dry_run=True))

    assert dry == real


@pytest.mark.parametrize(
    ("body", "content_type", "code"),
    [
        pytest.param(b"{", "application/json", 400, id="not-json"),
        pytest.param(json.dumps(review(pod())).encode(), "text/plain", 415, id="text"),
    ],
)
def test_malformed_calls_over_tls_get_a_4xx_and_the_server_keeps_serving(
    server, body, content_type, code
):
    status, answer = post(server.connection(), "/mutate", body, content_type)

    assert status == code
    assert answer["code"] == code
    assert post(server.connection(), "/mutate", review(pod()))[0] == 200


def test_a_body_over_the_cap_is_refused_with_413_before_it_is_read(server):
    conn = server.connection()
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()

    reply = conn.getresponse()

    assert reply.status == 413
    assert json.loads(reply.read())["code"] == 413


def test_a_body_just_under_the_cap_is_read(server):
    padded = review(pod())
    padded["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * (6 * 1024 * 1024)}

    status, answer = post(server.connection(), "/validate", padded)

    assert status == 200
    assert answer["response"]["allowed"] is True


def _connect_with(server, *, maximum):
    context = server.client_context()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1 on purpose
        context.minimum_version = min(maximum, ssl.TLSVersion.TLSv1_2)
        context.maximum_version = maximum
    conn = server.connection()
    conn._context = context  # the standard library keeps the context here
    conn.connect()
    return conn.sock.version()


def test_tls_1_2_is_accepted_and_older_is_refused(server):
    assert _connect_with(server, maximum=ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    with pytest.raises(ssl.SSLError):
        _connect_with(server, maximum=ssl.TLSVersion.TLSv1_1)


def test_readiness_says_the_same_on_both_ports(server):
    conn = server.connection()
    conn.request("GET", "/readyz")
    reply = conn.getresponse()
    over_tls = (reply.status, reply.read().decode())

    assert over_tls == server.health("/readyz") == (200, "ready\n")


def test_health_and_merged_metrics_are_served_on_the_plain_port(server):
    for _ in range(6):
        post(server.connection(), "/validate", review(pod(gpus="500m")))

    assert server.health("/healthz") == (200, "ok\n")
    assert server.health("/readyz")[0] == 200
    # Workers hand their counts to the metrics files in batches, at least every reload tick.
    deadline = time.monotonic() + 10
    while True:
        status, text = server.health("/metrics")
        assert status == 200
        denied = re.search(
            r'gpu_webhook_requests_total\{decision="denied",endpoint="validate",kind="Pod",'
            r'operation="CREATE"\} (\S+)',
            text,
        )
        fractional = re.search(
            r'gpu_webhook_findings_total\{action="deny",endpoint="validate",'
            r'rule="builtin/fractionalQuantity"\} (\S+)',
            text,
        )
        if (fractional and float(fractional.group(1)) >= 6) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert denied is not None
    assert float(denied.group(1)) >= 6
    assert (
        'gpu_webhook_findings_total{action="deny",endpoint="validate",rule="builtin/fractionalQuantity"}'
        in text
    )
    assert "gpu_webhook_inventory_nodes 4.0" in text
    assert "gpu_webhook_request_duration_seconds_bucket" in text


# --- changes on disk while serving ---------------------------------------------------------


@pytest.fixture
def mounted(tmp_path):
    """A server whose rules and certificates are mounted like a ConfigMap and a Secret."""
    rules = {p.name: p.read_bytes() for p in RULES.glob("*.yaml")}
    mount(tmp_path / "rules", rules, version="1")
    certs = _cert_files(tmp_path / "gen1")
    mount(tmp_path / "certs", certs, version="1")
    running = Server(
        tmp=tmp_path, cert_dir=tmp_path / "certs", rules=tmp_path / "rules", inventory=INVENTORY
    )
    yield running, rules
    assert running.stop() == 0, running.log.read_text()


def test_rules_swapped_in_like_a_configmap_take_effect_under_load_without_a_failed_request(
    mounted,
):
    server, rules = mounted
    with Load(server, review(pod(gpus=2))) as load:
        assert load.wait_for(True)

        mount(
            server.cert_dir.parent / "rules",
            {**rules, "95-quota.yaml": quota(1).encode()},
            version="2",
        )
        assert load.wait_for(False), "the new rule never took effect"

        broken = {
            **rules,
            "95-quota.yaml": b"apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nspec: 7\n",
        }
        mount(server.cert_dir.parent / "rules", broken, version="3")
        time.sleep(4.5)  # two reload periods
        assert load.wait_for(False), "a broken set replaced the last good rules"

    assert load.failures == []
    assert load.errors == []
    assert len(load.answers) > 50
    assert 'gpu_webhook_rule_reloads_total{result="failure"}' in server.health("/metrics")[1]
    log = server.log.read_text()
    assert "new rule files rejected" in log
    assert "95-quota.yaml" in log


def test_a_rotated_certificate_is_served_to_new_connections_without_failing_any_request(mounted):
    server, _ = mounted
    with Load(server, review(pod(gpus=1))) as load:
        assert load.wait_for(True)
        old_conn = server.connection()
        post(old_conn, "/mutate", review(pod()))

        mount(server.cert_dir, _cert_files(server.cert_dir.parent / "gen2"), version="2")
        time.sleep(0.5)

        fresh = server.connection()  # verifies against the new CA only
        status, _ = post(fresh, "/mutate", review(pod()))
        assert status == 200
        assert post(old_conn, "/mutate", review(pod()))[0] == 200

    assert load.failures == []
    assert load.errors == []


# --- the command line ----------------------------------------------------------------------


def test_serve_refuses_broken_rules_before_starting(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("apiVersion: nope\nkind: GPUPolicy\n")

    code = main(["serve", "--rules", str(tmp_path), "--cert-dir", str(tmp_path)])

    assert code == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_serve_names_the_missing_certificate(tmp_path, capsys):
    code = main(["serve", "--cert-dir", str(tmp_path / "none")])

    assert code == 2
    assert "tls.crt does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        pytest.param("GPU_WEBHOOK_PORT", "https", "--port must be a whole number", id="port"),
        pytest.param("GPU_WEBHOOK_WORKERS", "0", "--workers must be at least 1", id="workers"),
        pytest.param(
            "GPU_WEBHOOK_INVENTORY_FAILURE_MODE", "maybe", "allow or deny", id="failure-mode"
        ),
        pytest.param(
            "GPU_WEBHOOK_SYNC_MATCH_CONDITIONS",
            "maybe",
            "GPU_WEBHOOK_SYNC_MATCH_CONDITIONS must be true or false",
            id="sync-match-conditions",
        ),
        pytest.param(
            "GPU_WEBHOOK_WEBHOOK_CONFIGURATION",
            "GPU Webhook",
            "--webhook-configuration must be an object name",
            id="webhook-configuration",
        ),
    ],
)
def test_settings_come_from_the_environment_and_bad_ones_are_named(
    monkeypatch, capsys, variable, value, message
):
    monkeypatch.setenv(variable, value)

    assert main(["serve"]) == 2
    assert message in capsys.readouterr().err


def test_sigterm_lets_a_review_in_flight_finish_and_then_exits_cleanly(tmp_path):
    write_dev_certs(tmp_path / "certs")
    running = Server(
        tmp=tmp_path, cert_dir=tmp_path / "certs", rules=RULES, inventory=INVENTORY, workers=1
    )
    body = json.dumps(review(pod(gpus=1))).encode()
    conn = running.connection()
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    conn.send(body[:100])
    time.sleep(0.5)  # the worker is now reading this review's body

    running.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    conn.send(body[100:])
    reply = conn.getresponse()

    assert reply.status == 200
    assert json.loads(reply.read())["response"]["allowed"] is True
    assert running.process.wait(timeout=30) == 0, running.log.read_text()
