import pytest

from tests.builders import decoded_patch
from webhook.admission.response import (
    MAX_PATCH_BYTES,
    MAX_WARNINGS_TOTAL,
    PatchTooLarge,
    reply,
)


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


def test_warnings_that_fit_are_sent_as_they_are():
    warnings = [f"{i:03d}".ljust(100, "x") for i in range(10)]

    response = reply(allowed=True, warnings=warnings).body("u")["response"]

    assert response["warnings"] == warnings


@pytest.mark.parametrize("count", [41, 100, 20_000])  # 100 characters each
def test_warnings_past_what_the_api_server_passes_on_end_with_how_many_were_left_out(count):
    warnings = [f"{i:05d}".ljust(100, "x") for i in range(count)]

    sent = reply(allowed=True, warnings=warnings).body("u")["response"]["warnings"]

    *kept, marker = sent
    assert kept == warnings[: len(kept)]
    assert len(kept) == 40  # 4,000 characters, and the marker fits in what is left
    left_out = f"{count - 40:,} more warning" + ("s" if count - 40 > 1 else "")
    assert marker == f"gpu-webhook: {left_out} left out; gpu-webhook check shows them all"
    assert sum(map(len, sent)) <= MAX_WARNINGS_TOTAL
    assert len(marker) < 120


def test_the_marker_takes_the_room_of_the_warnings_before_it_when_it_must():
    warnings = [f"{i:04d}".ljust(1000, "x") for i in range(5)]  # 4 fit: 4,000 characters

    sent = reply(allowed=True, warnings=warnings).body("u")["response"]["warnings"]

    assert sent[:-1] == warnings[:4]
    assert sent[-1].startswith("gpu-webhook: 1 more warning left out")
    warnings = [f"{i:04d}".ljust(1010, "x") for i in range(5)]  # 4,040 and no room for it

    sent = reply(allowed=True, warnings=warnings).body("u")["response"]["warnings"]

    assert sent[:-1] == warnings[:3]
    assert sent[-1].startswith("gpu-webhook: 2 more warnings left out")


def test_control_characters_in_a_warning_become_spaces_so_the_api_server_keeps_it():
    sent = reply(allowed=True, warnings=["a\nb\tc\x85d"]).body("u")["response"]["warnings"]

    assert sent == ["a b c d"]


def test_control_characters_in_a_denial_become_spaces_so_kubectl_prints_no_escape():
    message = "container \x1b]0;owned\x07 asks\r\nfor \x9b2J GPUs"

    sent = reply(allowed=False, message=message).body("u")["response"]["status"]["message"]

    assert sent == "container  ]0;owned  asks  for  2J GPUs"


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
    assert response["warnings"] == ["a warning that quotes  uid "]  # controls made spaces
    assert response["auditAnnotations"] == {"gpu-webhook/rule": "\x00uid\x00"}
    if not allowed:
        assert response["status"]["message"] == "a message that quotes  uid "


# --- answers bounded in size (issue 27) ---------------------------------------------------


def test_a_patch_over_the_limit_is_refused_with_its_size_and_the_limit():
    ops = [
        {"op": "add", "path": f"/metadata/labels/l{i}", "value": "v" * 1000} for i in range(3300)
    ]

    with pytest.raises(PatchTooLarge) as refused:
        reply(allowed=True, patch=ops)

    assert f"{MAX_PATCH_BYTES:,}" in str(refused.value)
    assert "3,300 operations" in str(refused.value)


def test_a_patch_just_under_the_limit_is_sent_whole():
    ops = [
        {"op": "add", "path": f"/metadata/labels/l{i}", "value": "v" * 1000} for i in range(2900)
    ]

    response = reply(allowed=True, patch=ops).body("u")["response"]

    assert decoded_patch(response) == ops
