"""Strict decoding: what the API server refuses in a built-in kind, field by field, checked
against kubernetes-validate's strict schemas (an independent reading of the same OpenAPI)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kubeschema import decoding_errors
from webhook.engine.kube.strict import container_resource_problem, strict_problems
from webhook.files.manifests import load_manifests
from webhook.files.shipped import kube_schema

SCHEMA = kube_schema()
CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def pod(**container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "main", "image": "cuda", **container}]},
    }


def said(obj: dict[str, Any]) -> list[str]:
    found, _ = strict_problems(obj, SCHEMA)
    return [str(r) for r in found]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            pod(resource={"limits": {"nvidia.com/gpu": 1}}),
            ['spec.containers[0].resource: unknown field; did you mean "resources"?'],
            id="resource-for-resources",
        ),
        pytest.param(
            pod(Resources={}),
            ['spec.containers[0].Resources: unknown field; did you mean "resources"?'],
            id="field-names-are-case-sensitive",
        ),
        pytest.param(
            pod(xyzzy=1),
            ["spec.containers[0].xyzzy: unknown field"],
            id="unknown-field-nothing-close",
        ),
        pytest.param(
            pod(env=[{"name": "X", "value": 1}]),
            ["spec.containers[0].env[0].value: 1 is a number where Kubernetes wants a string"],
            id="number-for-string",
        ),
        pytest.param(
            {**pod(), "metadata": {"name": "p", "labels": {"on": True}}},
            ["metadata.labels.on: true is a boolean where Kubernetes wants a string"],
            id="boolean-label-value",
        ),
        pytest.param(
            pod(stdin="yes"),
            ['spec.containers[0].stdin: "yes" is a string where Kubernetes wants true or false'],
            id="string-for-boolean",
        ),
        pytest.param(
            pod(ports=[{"containerPort": 80.5}]),
            [
                "spec.containers[0].ports[0].containerPort: 80.5 is a number where Kubernetes "
                "wants a whole number"
            ],
            id="fraction-for-integer",
        ),
        pytest.param(
            pod(ports=[{"containerPort": 2**64}]),
            [
                "spec.containers[0].ports[0].containerPort: 18446744073709551616 is out of "
                "range for a whole number"
            ],
            id="integer-out-of-range",
        ),
        pytest.param(
            pod(resources={"limits": {"gpu": 1}}),
            [
                'spec.containers[0].resources.limits.gpu: "gpu" is not a container resource '
                "Kubernetes accepts: cpu, memory, ephemeral-storage, hugepages-<size>, or a "
                "domain-prefixed name such as nvidia.com/gpu"
            ],
            id="unprefixed-extended-resource",
        ),
        pytest.param(
            pod(resources={"limits": {"nvidia.com/gpu": True}}),
            [
                "spec.containers[0].resources.limits.nvidia.com/gpu: true is a boolean where "
                "Kubernetes wants a number or a string"
            ],
            id="boolean-quantity",
        ),
        pytest.param(pod(ports=[{"containerPort": 80.0}]), [], id="whole-float-is-an-integer"),
        pytest.param(pod(resources={"limits": {"nvidia.com/gpu": "1"}}), [], id="quantity-string"),
        pytest.param(pod(resources={"limits": {"nvidia.com/gpu": 0.5}}), [], id="quantity-number"),
        pytest.param(pod(resources=None, env=None), [], id="null-is-absent"),
        pytest.param(
            pod(livenessProbe={"httpGet": {"port": "http"}}), [], id="int-or-string-string"
        ),
        pytest.param(
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"anything": 1}},
            [],
            id="custom-resources-are-not-judged",
        ),
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replica": 2}},
            ['spec.replica: unknown field; did you mean "replicas"?'],
            id="deployment",
        ),
        pytest.param(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "spec": {"devices": {"request": []}},
            },
            ['spec.devices.request: unknown field; did you mean "requests"?'],
            id="resource-claim",
        ),
    ],
)
def test_what_the_api_server_refuses_is_named_at_its_field(
    obj: dict[str, Any], expected: list[str]
) -> None:
    assert said(obj) == expected


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        pytest.param("cpu", False, id="cpu"),
        pytest.param("memory", False, id="memory"),
        pytest.param("ephemeral-storage", False, id="ephemeral-storage"),
        pytest.param("hugepages-2Mi", False, id="hugepages"),
        pytest.param("nvidia.com/gpu", False, id="extended"),
        pytest.param("nvidia.com/gpus", False, id="misspelt-but-valid-name"),
        pytest.param("nvidia.com/mig-1g.5gb", False, id="mig-profile"),
        pytest.param("kubernetes.io/anything", False, id="native-prefixed"),
        pytest.param("gpu", True, id="unprefixed"),
        pytest.param("Nvidia.com/gpu", True, id="upper-case-domain"),
        pytest.param("nvidia.com/-gpu", True, id="name-starts-with-dash"),
        pytest.param("a/b/c", True, id="two-slashes"),
        pytest.param("requests.nvidia.com/gpu", True, id="quota-prefix"),
        pytest.param("nvidia.com/" + "g" * 64, True, id="name-too-long"),
    ],
)
def test_container_resource_names_as_kubernetes_validates_them(name: str, refused: bool) -> None:
    assert (container_resource_problem(name) is not None) is refused


def test_problems_stop_at_the_limit_and_count_the_rest() -> None:
    obj = pod(**{f"field{i}": 1 for i in range(30)})
    found, more = strict_problems(obj, SCHEMA, limit=20)
    assert (len(found), more) == (20, 10)


# --- the differential: kubernetes-validate's strict schema agrees --------------------------


def _builtin(obj: Any) -> bool:
    return SCHEMA.root(obj) is not None


def _corpus_objects() -> list[Any]:
    paths = [str(p) for p in sorted(CORPUS.rglob("*.yaml")) if "_unparseable" not in p.parts]
    objects = []
    for path in paths:
        docs, _ = load_manifests([path])
        objects += [d.obj for d in docs if _builtin(d.obj)]
    return objects


CORPUS_OBJECTS = _corpus_objects()


def _refused_by_decoding(obj: Any) -> bool:
    found, _ = strict_problems(obj, SCHEMA, limit=1000)
    # Resource names are API validation, which the JSON schemas do not hold.
    return any(r.rule != "resourceName" for r in found)


def test_the_corpus_holds_built_in_objects_to_compare() -> None:
    assert len(CORPUS_OBJECTS) > 50


@pytest.mark.parametrize("index", range(len(CORPUS_OBJECTS)))
def test_each_corpus_object_is_refused_exactly_when_kubernetes_validate_refuses_it(
    index: int,
) -> None:
    obj = CORPUS_OBJECTS[index]
    try:
        theirs = decoding_errors(obj)
    except kubernetes_validate.SchemaNotFoundError:
        pytest.skip("a kind kubernetes-validate does not hold")
    assert _refused_by_decoding(obj) is bool(theirs), (said(obj), theirs)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*at, index))
    return found


def _parent(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        obj = obj[step]
    return obj


REPLACEMENTS = st.sampled_from([1, "x", True, 2.5, [], {}, None, {"a": 1}, ["a"]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_corpus_object_with_one_change_is_judged_as_kubernetes_validate_judges_it(
    data: st.DataObject,
) -> None:
    obj = copy.deepcopy(data.draw(st.sampled_from(CORPUS_OBJECTS)))
    # Any field but the identity that chooses the schema.
    path = data.draw(
        st.sampled_from([p for p in _paths(obj) if p[:1] not in ((), ("apiVersion",), ("kind",))])
    )
    parent = _parent(obj, path)
    if data.draw(st.booleans()) and isinstance(parent, dict):
        key = path[-1]
        typo = data.draw(st.sampled_from([key[:-1], key + "s", key.capitalize(), key + "_"]))
        if typo and typo not in parent:
            parent[typo] = parent.pop(key)
    else:
        parent[path[-1]] = data.draw(REPLACEMENTS)
    try:
        theirs = decoding_errors(obj)
    except kubernetes_validate.SchemaNotFoundError:
        return
    assert _refused_by_decoding(obj) is bool(theirs), (said(obj), theirs)
