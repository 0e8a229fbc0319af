import json

import pytest

from tests.builders import FIXTURES, pod, review, scale_review
from tests.scaling import deployment
from webhook.admission.review import ReviewError, parse_review, read_uid


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_every_recorded_review_parses_with_its_uid_and_operation(path):
    body = path.read_bytes()
    raw = json.loads(body)["request"]

    request = parse_review(body)

    assert request.uid == raw["uid"]
    assert request.operation == raw["operation"]
    assert request.kind == raw["kind"]["kind"]
    assert request.dry_run is raw.get("dryRun", False)
    assert request.object == raw["object"]


def test_a_review_carries_user_namespace_and_subresource():
    body = review(pod(), sub_resource="status")

    request = parse_review(json.dumps(body))

    assert (request.user, request.namespace, request.sub_resource) == ("alice", "default", "status")


def test_a_scale_review_names_its_parent_by_resource_and_name_only():
    """The Scale's kind is autoscaling/v1 whatever it scales: the parent's group, version
    and plural come from ``request.resource`` (kubernetes/website,
    extensible-admission-controllers.md, the request example)."""
    body = scale_review(deployment("serve"), 4, old_replicas=1, resource="deployments")

    request = parse_review(json.dumps(body))

    assert (request.group, request.kind, request.sub_resource) == ("autoscaling", "Scale", "scale")
    assert (request.resource_group, request.resource_version, request.resource) == (
        "apps",
        "v1",
        "deployments",
    )
    assert (request.namespace, request.name) == ("team-a", "serve")


def test_a_delete_has_no_object_and_is_still_a_review():
    request = parse_review(json.dumps(review(None, operation="DELETE", old=pod())))

    assert request.object is None
    assert request.old_object is not None


def _with_request(**changes):
    body = review(pod())
    body["request"].update(changes)
    return json.dumps(body)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"\xff\xfe{", "not JSON", id="binary"),
        pytest.param(b"", "not JSON", id="empty"),
        pytest.param(b"[1, 2]", "not a JSON object", id="array"),
        pytest.param(b'{"kind": "Pod"}', "not an AdmissionReview", id="other-kind"),
        pytest.param(
            b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}',
            "not an AdmissionReview",
            id="v1beta1",
        ),
        pytest.param(
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            "request is missing",
            id="no-request",
        ),
        pytest.param(_with_request(uid=None), "request.uid", id="no-uid"),
        pytest.param(_with_request(uid=7), "request.uid", id="numeric-uid"),
        pytest.param(_with_request(operation="PATCH"), "request.operation", id="bad-operation"),
        pytest.param(_with_request(operation=["CREATE"]), "request.operation", id="list-operation"),
        pytest.param(_with_request(kind="Pod"), "request.kind", id="kind-as-string"),
        pytest.param(_with_request(object=[1]), "request.object must be", id="list-object"),
        pytest.param(_with_request(object="pod"), "request.object must be", id="string-object"),
        pytest.param(_with_request(object=None), "required for CREATE", id="create-no-object"),
        pytest.param(_with_request(oldObject=3), "request.oldObject", id="number-old-object"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "nested too deeply", id="deep-nesting"),
    ],
)
def test_a_body_that_is_not_a_usable_review_is_refused_with_the_reason(body, reason):
    with pytest.raises(ReviewError, match=reason):
        parse_review(body)


@pytest.mark.parametrize(
    ("body", "uid"),
    [
        pytest.param(json.dumps(review(pod(), uid="abc")), "abc", id="good"),
        pytest.param(_with_request(uid=7), "", id="numeric"),
        pytest.param(b"\xff", "", id="garbage"),
        pytest.param(b'{"request": 1}', "", id="request-not-object"),
    ],
)
def test_the_uid_of_a_broken_body_is_read_for_the_log_when_it_is_there(body, uid):
    assert read_uid(body) == uid
