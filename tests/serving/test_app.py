import io
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from tests.builders import FIXTURES, INVENTORY, decoded_patch, patched, pod, review
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.service import AdmissionService
from webhook.files.rulefiles import RuleStore
from webhook.serving import metrics
from webhook.serving.app import create_app
from webhook.serving.logs import JsonFormatter


@pytest.fixture(scope="module")
def client():
    service = AdmissionService(
        rules=RuleStore("rules"), inventory=StaticInventorySource(str(INVENTORY))
    )
    return create_app(service, max_body=64 * 1024).test_client()


def post(client, endpoint, body, content_type="application/json"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(endpoint, data=data, content_type=content_type)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_every_recorded_review_is_answered_with_its_uid(client, path):
    body = json.loads(path.read_text())
    endpoint = "/mutate" if "-mutate-" in path.name else "/validate"

    reply = post(client, endpoint, body)

    assert reply.status_code == 200
    assert reply.mimetype == "application/json"
    assert reply.json["response"]["uid"] == body["request"]["uid"]
    obj = body["request"]["object"]
    assert patched(obj, reply.json["response"])["kind"] == obj["kind"]


def test_a_gpu_pod_at_mutate_gets_a_patch_and_at_validate_none(client):
    assert decoded_patch(post(client, "/mutate", review(pod())).json["response"])
    assert "patch" not in post(client, "/validate", review(pod())).json["response"]


def test_a_denial_is_an_http_200_with_status_403(client):
    reply = post(client, "/mutate", review(pod(gpus="1.5")))

    assert reply.status_code == 200
    assert reply.json["response"]["status"]["code"] == 403


@pytest.mark.parametrize(
    ("body", "content_type", "code"),
    [
        pytest.param(b"not json", "application/json", 400, id="not-json"),
        pytest.param(b'{"apiVersion": "v1", "kind": "Pod"}', "application/json", 400, id="pod"),
        pytest.param(json.dumps(review(pod())).encode(), "text/plain", 415, id="text-plain"),
        pytest.param(json.dumps(review(pod())).encode(), "", 415, id="no-content-type"),
        pytest.param(b" " * (64 * 1024 + 1), "application/json", 413, id="over-cap"),
        pytest.param(b"[" * 30_000 + b"]" * 30_000, "application/json", 400, id="deep"),
    ],
)
def test_a_malformed_call_gets_a_short_4xx_json_reason(client, body, content_type, code):
    reply = client.post("/mutate", data=body, content_type=content_type)

    assert reply.status_code == code
    assert reply.json["code"] == code
    assert "Traceback" not in reply.get_data(as_text=True)


@pytest.mark.parametrize(
    ("content_type", "code"),
    [
        pytest.param("application/json", 200, id="json"),
        pytest.param("application/json; charset=utf-8", 200, id="with-charset"),
        pytest.param("Application/JSON ;charset=UTF-8", 200, id="any-case-and-spacing"),
        pytest.param("application/json-patch+json", 415, id="another-json-type"),
        pytest.param("text/plain; application/json", 415, id="json-as-a-parameter"),
    ],
)
def test_the_content_type_is_read_as_werkzeug_reads_it(client, content_type, code):
    reply = client.post("/mutate", data=json.dumps(review(pod())), content_type=content_type)

    assert reply.status_code == code


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        pytest.param("GET", "/mutate", 405, id="get-mutate"),
        pytest.param("POST", "/nowhere", 404, id="unknown-path"),
    ],
)
def test_wrong_routes_get_a_json_error(client, method, path, code):
    reply = client.open(path, method=method)

    assert reply.status_code == code
    assert reply.json["code"] == code


def test_one_json_log_line_per_review_names_uid_decision_rules_and_duration(client, caplog):
    with caplog.at_level(logging.INFO, logger="gpu_webhook.review"):
        post(client, "/mutate", review(pod(gpus="500m"), uid="u-7", dry_run=True))

    (record,) = [r for r in caplog.records if r.name == "gpu_webhook.review"]
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "review"
    assert line["uid"] == "u-7"
    assert (line["kind"], line["namespace"], line["name"]) == ("Pod", "default", "p")
    assert (line["operation"], line["user"], line["dry_run"]) == ("CREATE", "alice", True)
    assert line["decision"] == "denied"
    assert line["rules_fired"] == ["builtin/fractionalQuantity"]
    assert line["duration_ms"] > 0


def test_health_and_readiness_answer_and_reviews_are_counted(client):
    post(client, "/validate", review(pod(gpus="500m")))

    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    text = metrics.exposition()[0].decode()
    assert 'gpu_webhook_requests_total{decision="denied",endpoint="validate"' in text
    assert 'gpu_webhook_findings_total{action="deny",endpoint="validate",' in text
    assert "gpu_webhook_request_duration_seconds_bucket" in text


def test_metrics_are_not_served_on_the_webhook_port(client):
    """Every pod may reach the webhook port; the metrics are for Prometheus, on 8080."""
    assert client.get("/metrics").status_code == 404


def test_an_object_the_engine_cannot_read_with_a_huge_uid_writes_short_log_lines(
    caplog, monkeypatch
):
    """The engine reads every ill-typed pod field tried so far; a failure is forced here
    to show what its log line and the review line hold then."""
    service = AdmissionService(rules=RuleStore("rules"))
    uid = "u" * (4 << 20)

    def unreadable(*args, **kwargs):
        raise TypeError(f"cannot read the object of {uid}")

    monkeypatch.setattr(service.memo, "judge", unreadable)
    with caplog.at_level(logging.INFO):
        answer = post(create_app(service).test_client(), "/mutate", review(pod(), uid=uid))

    assert answer.status_code == 200
    assert answer.get_json()["response"]["allowed"] is False
    lines = [JsonFormatter().format(record) for record in caplog.records]
    assert any("engine failed on Pod" in line for line in lines)
    assert max(len(line) for line in lines) < 20_000


# --- fuzzing: no generated body gets a 5xx ----------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
quantities = st.one_of(
    st.integers(-3, 100),
    st.sampled_from(["1", "0.5", "500m", "1Ki", "x", "", "1e3", "-1"]),
    json_values,
)
resource_names = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu", "cpu"])
resources = st.fixed_dictionaries(
    {},
    optional={
        "limits": st.dictionaries(resource_names, quantities, max_size=2) | json_values,
        "requests": st.dictionaries(resource_names, quantities, max_size=2) | json_values,
    },
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.text(max_size=5) | json_values},
        optional={"resources": resources | json_values, "env": json_values},
    )
    | json_values,
    max_size=3,
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "containers": containers | json_values,
        "initContainers": containers,
        "nodeSelector": json_values,
        "tolerations": json_values,
        "affinity": json_values,
        "overhead": json_values,
    },
)
kinds = st.sampled_from(["Pod", "Deployment", "Job", "CronJob", "PyTorchJob", "ConfigMap"])


@st.composite
def objects(draw):
    kind = draw(kinds)
    spec = draw(specs)
    template = {"metadata": draw(json_values | st.just({"labels": {"a": "b"}})), "spec": spec}
    obj = {
        "apiVersion": draw(st.sampled_from(["v1", "apps/v1", "batch/v1", "kubeflow.org/v1"])),
        "kind": kind,
        "metadata": draw(json_values | st.just({"name": "x"})),
    }
    if kind == "Pod":
        obj["spec"] = spec
    elif kind == "CronJob":
        obj["spec"] = {"jobTemplate": {"spec": {"template": template}}}
    elif kind == "PyTorchJob":
        obj["spec"] = {
            "pytorchReplicaSpecs": {"Worker": {"replicas": draw(quantities), "template": template}}
        }
    else:
        obj["spec"] = {"replicas": draw(quantities), "template": template}
    return obj


@st.composite
def reviews(draw):
    obj = draw(objects())
    body = review(
        obj,
        operation=draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])),
        old=draw(st.none() | objects()),
        dry_run=draw(st.booleans()),
        sub_resource=draw(st.sampled_from([None, "status", "eviction"])),
    )
    request = body["request"]
    for key in draw(st.lists(st.sampled_from(sorted(request)), max_size=2)):
        request[key] = draw(json_values)
    return json.dumps(body).encode()


bodies = st.one_of(
    reviews(),
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    json_values.map(
        lambda v: json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": v}
        ).encode()
    ),
)


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    endpoint=st.sampled_from(["/mutate", "/validate"]),
    body=bodies,
    content_type=st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
            "application/x-www-form-urlencoded",
        ]
    ),
)
def test_no_generated_body_gets_a_server_error(client, endpoint, body, content_type):
    reply = client.post(endpoint, data=body, content_type=content_type)

    assert reply.status_code < 500, reply.get_data(as_text=True)[:500]
    if reply.status_code == 200:
        assert reply.json["response"]["uid"] == json.loads(body)["request"]["uid"]


def test_batched_latencies_land_in_the_same_buckets_as_one_observation_each() -> None:
    registry = CollectorRegistry()
    batched = Histogram("b_seconds", "b", ["endpoint"], buckets=(0.001, 0.01), registry=registry)
    single = Histogram("s_seconds", "s", ["endpoint"], buckets=(0.001, 0.01), registry=registry)
    values = [0.0005, 0.001, 0.002, 0.5, 0.0001]

    metrics._observe_all(batched.labels("mutate"), values)
    for value in values:
        single.labels("mutate").observe(value)

    def samples(prefix: str) -> dict[tuple[str, str], float]:
        return {
            (s.name.removeprefix(prefix), s.labels.get("le", "")): s.value
            for family in registry.collect()
            for s in family.samples
            if s.name.startswith(prefix) and not s.name.endswith("_created")
        }

    assert samples("b_seconds") == pytest.approx(samples("s_seconds"))


def test_the_log_line_names_the_rules_whose_mutations_are_in_the_patch(client, caplog):
    with caplog.at_level(logging.INFO, logger="gpu_webhook.review"):
        post(client, "/mutate", review(pod(gpus="1"), uid="u-8"))
        post(client, "/validate", review(pod(gpus="1"), uid="u-9"))

    mutate, validate = [
        json.loads(JsonFormatter().format(r))
        for r in caplog.records
        if r.name == "gpu_webhook.review"
    ]
    assert mutate["patch_ops"] > 0
    assert mutate["rules_fired"] == ["nvidia-gpu-taint/mutate"]
    assert validate["rules_fired"] == []  # no patch is sent on /validate


def test_readiness_says_ready_in_the_words_of_the_health_port(client):
    reply = client.get("/readyz")
    assert (reply.status_code, reply.get_data(as_text=True)) == (200, "ready\n")


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        pytest.param("/mutate", review(pod()), id="mutated"),
        pytest.param("/validate", review(pod()), id="validated"),
        pytest.param("/mutate", review(pod(gpus="1.5")), id="denied"),
        pytest.param("/mutate", {"apiVersion": "v1", "kind": "Pod"}, id="not-a-review"),
    ],
)
def test_a_review_in_chunks_is_answered_as_one_with_a_declared_length(client, endpoint, body):
    data = json.dumps(body).encode()

    declared = post(client, endpoint, data)
    chunked = client.post(  # no length: what gunicorn passes on for a chunked body
        endpoint,
        input_stream=io.BytesIO(data),
        content_type="application/json",
        environ_overrides={"CONTENT_LENGTH": ""},
    )

    assert (chunked.status_code, chunked.json) == (declared.status_code, declared.json)
    assert chunked.headers["Content-Type"] == declared.headers["Content-Type"]


def test_a_body_shorter_than_its_declared_length_gets_a_400(client):
    data = json.dumps(review(pod())).encode()

    reply = client.post(
        "/mutate",
        data=data,
        content_type="application/json",
        environ_overrides={"CONTENT_LENGTH": str(len(data) + 10)},
    )

    assert (reply.status_code, reply.json) == (400, {"error": "Bad Request", "code": 400})


class BrokenService:
    def review(self, request, *, mutate):
        raise RuntimeError("a bug")


def test_a_bug_answering_a_review_is_a_json_500_and_a_logged_traceback(caplog):
    client = create_app(BrokenService(), max_body=64 * 1024).test_client()  # type: ignore[arg-type]

    with caplog.at_level(logging.ERROR, logger="gpu_webhook.app"):
        reply = post(client, "/mutate", review(pod()))

    assert (reply.status_code, reply.json) == (500, {"error": "internal error", "code": 500})
    assert "RuntimeError: a bug" in caplog.text
