"""The serving context's rotations: a pair on disk is put in force only when it serves at
least as long as the one in force (issue 41); what it refuses is logged and heard."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import certchains
from tests.certchains import DAY
from webhook.files.certs import ServingPair, write
from webhook.serving import tls

ROOT = certchains.authority("root CA")


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Heard:
    def __init__(self) -> None:
        self.loads: list[float] = []
        self.refusals: list[str] = []


@pytest.fixture
def served(tmp_path: Path) -> tuple[tls.ReloadingContext, Heard, Clock]:
    """A context serving a pair of ROOT valid for 30 days."""
    write(certchains.serving_pair(ROOT), tmp_path)
    heard, clock = Heard(), Clock()
    context = tls.ReloadingContext(
        tmp_path / "tls.crt",
        tmp_path / "tls.key",
        on_load=heard.loads.append,
        on_refusal=heard.refusals.append,
        clock=clock,
    )
    context.context()
    return context, heard, clock


def _mismatched_key() -> ServingPair:
    pair = certchains.serving_pair(ROOT, valid_until=60 * DAY)
    other = certchains.serving_pair(ROOT)
    return ServingPair(ca_crt=pair.ca_crt, tls_crt=pair.tls_crt, tls_key=other.tls_key)


@pytest.mark.parametrize(
    ("pair", "reason"),
    [
        pytest.param(
            lambda: certchains.serving_pair(ROOT, valid_from=-37 * DAY, valid_until=-7 * DAY),
            tls.EXPIRED,
            id="expired-a-week-ago",
        ),
        pytest.param(
            lambda: certchains.serving_pair(ROOT, valid_from=DAY, valid_until=90 * DAY),
            tls.NOT_YET_VALID,
            id="valid-from-tomorrow",
        ),
        pytest.param(
            lambda: certchains.serving_pair(ROOT, valid_until=10 * DAY),
            tls.EXPIRES_EARLIER,
            id="expires-before-the-one-in-force",
        ),
        pytest.param(_mismatched_key, tls.UNLOADABLE, id="key-of-another-certificate"),
    ],
)
def test_a_rotation_that_would_serve_worse_keeps_the_pair_in_force(
    served, tmp_path, caplog, pair: Callable[[], ServingPair], reason: str
):
    context, heard, _ = served
    in_force = context.context()
    write(pair(), tmp_path)

    with caplog.at_level(logging.ERROR, logger="gpu_webhook.tls"):
        assert context.context() is in_force
        assert context.context() is in_force

    assert heard.refusals == [reason], "refused once per change of the files"
    assert len(heard.loads) == 1
    (record,) = caplog.records
    assert record.getMessage().startswith("new TLS certificate not put in force")
    assert record.reason == reason  # type: ignore[attr-defined]


def test_a_pair_not_valid_yet_is_put_in_force_once_it_is(served, tmp_path):
    context, heard, clock = served
    in_force = context.context()
    write(certchains.serving_pair(ROOT, valid_from=DAY, valid_until=90 * DAY), tmp_path)
    assert context.context() is in_force

    clock.now += DAY.total_seconds() + 1

    assert context.context() is not in_force
    assert heard.refusals == [tls.NOT_YET_VALID]
    assert len(heard.loads) == 2
    assert heard.loads[1] > heard.loads[0]


@pytest.mark.parametrize(
    "chain",
    [
        pytest.param((), id="from-the-same-root"),
        pytest.param(
            (certchains.authority("intermediate", parent=ROOT),), id="via-an-intermediate"
        ),
    ],
)
def test_a_rotation_that_serves_longer_is_put_in_force(served, tmp_path, chain):
    context, heard, _ = served
    in_force = context.context()
    write(certchains.serving_pair(ROOT, chain=chain, valid_until=60 * DAY), tmp_path)

    assert context.context() is not in_force
    assert heard.refusals == []
    assert len(heard.loads) == 2


def test_after_a_refusal_a_good_pair_is_put_in_force(served, tmp_path):
    context, heard, _ = served
    write(certchains.serving_pair(ROOT, valid_from=-37 * DAY, valid_until=-7 * DAY), tmp_path)
    in_force = context.context()
    write(certchains.serving_pair(ROOT, valid_until=60 * DAY), tmp_path)

    assert context.context() is not in_force
    assert heard.refusals == [tls.EXPIRED]
    assert len(heard.loads) == 2


def test_the_first_load_serves_an_expired_pair_there_is_nothing_else_to_serve(tmp_path, caplog):
    write(certchains.serving_pair(ROOT, valid_from=-37 * DAY, valid_until=-7 * DAY), tmp_path)
    refusals: list[str] = []
    context = tls.ReloadingContext(
        tmp_path / "tls.crt", tmp_path / "tls.key", on_refusal=refusals.append
    )
    with caplog.at_level(logging.ERROR, logger="gpu_webhook.tls"):
        context.context()
    assert refusals == []
    assert "is not valid now; serving it" in caplog.text


@pytest.mark.parametrize(
    ("new", "in_force", "now", "reason"),
    [
        pytest.param(tls.Validity(0, 100), None, 100, tls.EXPIRED, id="expired-at-its-not-after"),
        pytest.param(tls.Validity(10, 100), None, 9, tls.NOT_YET_VALID, id="before-not-before"),
        pytest.param(tls.Validity(10, 100), None, 10, None, id="at-its-not-before"),
        pytest.param(
            tls.Validity(0, 99), tls.Validity(0, 100), 50, tls.EXPIRES_EARLIER, id="sooner"
        ),
        pytest.param(
            tls.Validity(0, 100), tls.Validity(0, 100), 50, None, id="same-expiry-written-again"
        ),
    ],
)
def test_refusal_reads_the_leafs_window(new, in_force, now, reason):
    assert tls.refusal(new, in_force=in_force, now=now) == reason
