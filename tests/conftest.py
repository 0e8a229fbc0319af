"""The two phases of ``scripts/test``: the suite runs in parallel (pytest-xdist), except the
tests marked ``serial``, which assert on timing under load of their own making (answers
within a second while workers are killed) and so run after the others, apart from them: the
two soaks side by side, one per worker (``-n 2 --dist loadfile``), each with its own server.

``--phase parallel`` keeps every test but those, ``--phase serial`` only those; without
``--phase`` (a plain ``pytest``) every test runs. The phase deselects, so ``-k``, ``-m`` and
paths given beside it narrow the selection as usual.
"""

from __future__ import annotations

import pytest

PHASES = ("parallel", "serial")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase",
        choices=PHASES,
        default=None,
        help="parallel: every test not marked serial; serial: only those (default: all)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("--phase")
    if phase is None:
        return
    alone = phase == "serial"
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (kept if serial == alone else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
