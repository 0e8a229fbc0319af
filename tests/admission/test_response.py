import pytest

from tests.builders import decoded_patch
from webhook.admission.response import MAX_WARNINGS_TOTAL, reply


def test_an_allowed_answer_echoes_the_uid_and_carries_nothing_it_does_not_need():
    body = reply(allowed=True).body("u")

    assert body == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u", "allowed": True},
    }


def test_a_patch_is_sent_as_base64_json_patch():
    ops = [{"op": "add", "path": "/metadata/labels/a~1b", "value": "c"}]

    response = reply(allowed=True, patch=ops).body("u")["response"]

    assert decoded_patch(response) == ops


@pytest.mark.parametrize(
    ("count", "kept"),
    [pytest.param(10, 10, id="few"), pytest.param(100, MAX_WARNINGS_TOTAL // 100, id="many")],
)
def test_warnings_stay_within_what_the_api_server_shows(count, kept):
    warnings = [f"{i:03d}".ljust(100, "x") for i in range(count)]

    response = reply(allowed=True, warnings=warnings).body("u")["response"]

    assert response["warnings"] == warnings[:kept]


@pytest.mark.parametrize(
    "uid",
    [
        pytest.param("705ab4f5-6393-11e8-b7cc-42010a800002", id="api-server-uid"),
        pytest.param('a "quoted" \\ uid', id="escaped"),
        pytest.param("\x00uid\x00", id="the-placeholder-itself"),
    ],
)
@pytest.mark.parametrize(
    "allowed", [pytest.param(True, id="allowed"), pytest.param(False, id="denied")]
)
def test_a_reply_encoded_once_is_the_answer_for_any_uid(uid, allowed):
    ops = [{"op": "add", "path": "/metadata/labels/x", "value": "\x00uid\x00"}]
    encoded = reply(
        allowed=allowed,
        message="a message that quotes \x00uid\x00",
        patch=ops,
        warnings=["a warning that quotes \x00uid\x00"],
        audit={"gpu-webhook/rule": "\x00uid\x00"},
    )

    response = encoded.body(uid)["response"]

    assert response["uid"] == uid
    assert response["allowed"] is allowed
    assert decoded_patch(response) == ops
    assert response["warnings"] == ["a warning that quotes \x00uid\x00"]
    assert response["auditAnnotations"] == {"gpu-webhook/rule": "\x00uid\x00"}
    if not allowed:
        assert response["status"]["message"] == "a message that quotes \x00uid\x00"
