"""``certs install`` against a loopback server that answers like the API server."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from kubernetes import client

from tests.running import gpu_webhook, kubeconfig
from webhook.cluster import certinstall
from webhook.files import certs

ROOT = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
NS = "gpu-webhook"
SECRET = f"/api/v1/namespaces/{NS}/secrets/gpu-webhook-tls"
ADM = "/apis/admissionregistration.k8s.io/v1"
MUTATING = f"{ADM}/mutatingwebhookconfigurations/gpu-webhook"
VALIDATING = f"{ADM}/validatingwebhookconfigurations/gpu-webhook"
TARGET = certinstall.Target(
    namespace=NS, service="gpu-webhook", secret="gpu-webhook-tls", webhook_config="gpu-webhook"
)


def _configuration(kind: str, path: str) -> dict[str, object]:
    hook = {
        "name": f"{path.rsplit('/', 2)[-2][:8]}.gpu-webhook.io",
        "clientConfig": {"service": {"name": "gpu-webhook", "namespace": NS, "path": path}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "gpu-webhook"},
        "webhooks": [hook],
    }


@pytest.fixture
def cluster(fake_api):
    """The state after ``kubectl apply -k deploy/base``: namespace and configurations."""
    fake_api.namespaces.add(NS)
    fake_api.put_object(MUTATING, _configuration("MutatingWebhookConfiguration", MUTATING))
    fake_api.put_object(VALIDATING, _configuration("ValidatingWebhookConfiguration", VALIDATING))
    return fake_api


@pytest.fixture
def api(cluster):
    configuration = client.Configuration()
    configuration.host = cluster.url
    with client.ApiClient(configuration) as api_client:
        yield api_client


def stored_pair(cluster) -> certs.ServingPair:
    data = cluster.objects[SECRET]["data"]
    return certs.ServingPair(*(base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")))


def bundle(cluster, path: str) -> list[x509.Certificate]:
    pem = base64.b64decode(cluster.objects[path]["webhooks"][0]["clientConfig"]["caBundle"])
    return x509.load_pem_x509_certificates(pem)


def test_a_first_run_creates_the_secret_and_fills_both_ca_bundles(cluster, api):
    actions = certinstall.install(api, TARGET, now=NOW)
    assert [(r.method, r.path) for r in cluster.writes()] == [
        ("POST", f"/api/v1/namespaces/{NS}/secrets"),
        ("PATCH", MUTATING),
        ("PATCH", VALIDATING),
    ]
    secret = cluster.objects[SECRET]
    assert secret["type"] == "kubernetes.io/tls"
    pair = stored_pair(cluster)
    assert certs.inspect(pair, required=TARGET.names, now=NOW).problems == ()
    assert bundle(cluster, MUTATING) == bundle(cluster, VALIDATING) == [pair.ca()]
    assert actions[0] == "Secret gpu-webhook/gpu-webhook-tls: created"


def test_a_second_run_reads_and_writes_nothing(cluster, api):
    certinstall.install(api, TARGET, now=NOW)
    before = {path: obj["metadata"]["resourceVersion"] for path, obj in cluster.objects.items()}
    cluster.requests.clear()
    actions = certinstall.install(api, TARGET, now=NOW + dt.timedelta(days=100))
    assert cluster.writes() == []
    after = {path: obj["metadata"]["resourceVersion"] for path, obj in cluster.objects.items()}
    assert after == before
    assert all(a.endswith("kept") for a in actions), actions


def test_a_certificate_inside_the_renewal_window_is_replaced_and_the_old_ca_kept(cluster, api):
    certinstall.install(api, TARGET, now=NOW)
    old = stored_pair(cluster)
    later = NOW + dt.timedelta(days=certs.DEFAULT_DAYS - 29)
    actions = certinstall.install(api, TARGET, now=later)
    new = stored_pair(cluster)
    assert new.leaf() != old.leaf()
    assert certs.inspect(new, required=TARGET.names, now=later).problems == ()
    assert bundle(cluster, MUTATING) == bundle(cluster, VALIDATING) == [new.ca(), old.ca()]
    assert "renewed" in actions[0]


def test_an_expired_ca_leaves_the_bundle_at_the_next_renewal(cluster, api):
    certinstall.install(api, TARGET, now=NOW)
    certinstall.install(api, TARGET, now=NOW + dt.timedelta(days=certs.DEFAULT_DAYS - 1))
    current = stored_pair(cluster)
    # The second CA is due for renewal; the first one expired long ago.
    much_later = NOW + dt.timedelta(days=2 * certs.DEFAULT_DAYS - 2)
    certinstall.install(api, TARGET, now=much_later)
    assert bundle(cluster, MUTATING) == [stored_pair(cluster).ca(), current.ca()]


@pytest.mark.parametrize(
    ("target", "data_change", "why"),
    [
        pytest.param(TARGET, {"tls.key": None}, "stored pair unreadable", id="key-missing"),
        pytest.param(
            TARGET, {"tls.crt": base64.b64encode(b"junk").decode()}, "unreadable", id="junk-cert"
        ),
        pytest.param(
            dataclasses.replace(TARGET, extra_sans=("10.0.0.7",)),
            {},
            "SANs lack 10.0.0.7",
            id="a-san-was-added",
        ),
    ],
)
def test_a_secret_that_does_not_fit_is_renewed(cluster, api, target, data_change, why):
    certinstall.install(api, TARGET, now=NOW)
    secret = cluster.objects[SECRET]
    secret["data"] = {**secret["data"], **data_change}
    secret["data"] = {k: v for k, v in secret["data"].items() if v is not None}
    actions = certinstall.install(api, target, now=NOW)
    assert why in actions[0]
    assert certs.inspect(stored_pair(cluster), required=target.names, now=NOW).problems == ()


def test_losing_the_race_to_create_the_secret_adopts_the_winners_pair(cluster, api):
    theirs = certs.generate(service="gpu-webhook", namespace=NS, now=NOW)

    def another_installer_wins(req):
        if req.method == "POST" and SECRET not in cluster.objects:
            cluster.put_object(SECRET, _secret(theirs))
            return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
        return None

    cluster.intercept = another_installer_wins
    certinstall.install(api, TARGET, now=NOW)
    assert stored_pair(cluster) == theirs
    assert bundle(cluster, MUTATING) == bundle(cluster, VALIDATING) == [theirs.ca()]


def test_a_configuration_changed_between_read_and_patch_is_read_again(cluster, api):
    edits = []

    def someone_edits_first(req):
        if req.method == "PATCH" and req.path == MUTATING and not edits:
            edited = dict(cluster.objects[MUTATING])
            edited["metadata"] = {**edited["metadata"], "labels": {"edited": "yes"}}
            cluster.put_object(MUTATING, edited)
            edits.append(req)

    cluster.intercept = someone_edits_first
    certinstall.install(api, TARGET, now=NOW)
    patches = [r for r in cluster.requests if r.method == "PATCH" and r.path == MUTATING]
    assert len(patches) == 2, "the first patch should have met a 409 and been retried"
    assert cluster.objects[MUTATING]["metadata"]["labels"] == {"edited": "yes"}
    assert bundle(cluster, MUTATING) == [stored_pair(cluster).ca()]


def _secret(pair: certs.ServingPair) -> dict[str, object]:
    data = {"ca.crt": pair.ca_crt, "tls.crt": pair.tls_crt, "tls.key": pair.tls_key}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gpu-webhook-tls", "namespace": NS},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def test_the_command_installs_then_reports_that_it_kept_everything(cluster, tmp_path):
    config = kubeconfig(tmp_path, cluster.url)
    first = gpu_webhook("certs", "install", "--kubeconfig", config)
    assert first.returncode == 0, first.stderr
    assert "Secret gpu-webhook/gpu-webhook-tls: created" in first.stdout
    cluster.requests.clear()
    second = gpu_webhook("certs", "install", "--kubeconfig", config)
    assert second.returncode == 0, second.stderr
    assert cluster.writes() == []
    assert second.stdout.count("kept") == 3


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        pytest.param(
            lambda api: api.objects.pop(VALIDATING),
            "ValidatingWebhookConfiguration gpu-webhook not found: apply the manifests first",
            id="configurations-not-applied",
        ),
        pytest.param(
            lambda api: api.namespaces.clear(),
            'namespaces "gpu-webhook" not found',
            id="namespace-missing",
        ),
        pytest.param(
            lambda api: setattr(
                api, "intercept", lambda _req: (403, {"kind": "Status", "message": "forbidden"})
            ),
            "403",
            id="forbidden",
        ),
    ],
)
def test_the_command_explains_what_the_cluster_lacks(cluster, tmp_path, prepare, message):
    prepare(cluster)
    result = gpu_webhook("certs", "install", "--kubeconfig", kubeconfig(tmp_path, cluster.url))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_command_names_a_kubeconfig_it_cannot_load(tmp_path):
    missing = tmp_path / "nope"
    result = gpu_webhook("certs", "install", "--kubeconfig", missing)
    assert result.returncode == 2
    assert f"{missing}: cannot load cluster credentials" in result.stderr
    assert "Traceback" not in result.stderr
