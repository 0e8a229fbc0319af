"""The denial message: every reason while they fit, then how many were left out (issue 27)."""

from __future__ import annotations

import pytest

from webhook.engine.policy.decision import MAX_MESSAGE, MAX_REASON, Finding, decide, denial_message


def denial(n: int, *, length: int = 80) -> Finding:
    return Finding("builtin", "privileged", "deny", f"container c{n}: ".ljust(length, "x"), "s")


def test_a_few_reasons_are_given_whole_each_with_its_rule():
    findings = [denial(1), denial(2)]

    message = denial_message(findings)

    assert message == "; ".join(f"[builtin/privileged] {f.message}" for f in findings)


@pytest.mark.parametrize("count", [100, 101, 20_000])
def test_reasons_past_the_limit_are_counted_not_written(count):
    findings = [denial(n) for n in range(count)]

    message = denial_message(findings)

    assert len(message) <= MAX_MESSAGE
    parts = message.split("; ")
    *given, marker = parts
    assert given == [f"[builtin/privileged] {f.message}" for f in findings[: len(given)]]
    assert marker == (
        f"... and {count - len(given):,} more reasons left out of this message: run "
        "gpu-webhook check on the manifest to see them all"
    )


def test_a_message_exactly_at_the_limit_needs_no_marker():
    # "[builtin/privileged] " is 21 characters; two reasons and one separator fill it.
    length = (MAX_MESSAGE - 2) // 2 - 21
    findings = [denial(1, length=length), denial(2, length=length)]

    message = denial_message(findings)

    assert "left out" not in message
    assert len(message) <= MAX_MESSAGE


def test_one_long_reason_is_clipped_to_its_own_limit():
    (message,) = [denial_message([denial(1, length=100_000)])]

    assert len(message) == MAX_REASON
    assert message.endswith("…")


def test_the_decisions_message_is_the_clipped_one():
    decision = decide([denial(n) for n in range(20_000)], patch=(), mutated=None)

    assert not decision.allowed
    assert len(decision.message) <= MAX_MESSAGE
    assert "19,9" in decision.message.rsplit("; ", 1)[1]
