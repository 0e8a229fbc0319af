"""How much CEL evaluation a review may do: a step budget, and a cost estimate before it.

The API server bounds a DRA selector twice (``k8s.io/dynamic-resource-allocation/cel/
compile.go``, ``CompileCELExpression``; ``pkg/apis/resource/validation/validation.go``,
``validateCELSelector``): an expression whose *estimated* worst-case cost, by cel-go's cost
model over the declared sizes of the device
(``ResourceSliceMaxAttributesAndCapacitiesPerDevice`` = 32 entries per map,
``DeviceAttributeMaxValueLength`` = 64 characters per string), exceeds
``CELSelectorExpressionMaxCost`` (1,000,000) is refused, and the program
runs with ``cel.CostLimit`` set to that same number, so one evaluation stops there.

This webhook evaluates with celpy, which walks its parse tree in Python: a cel-go cost unit
is a few nanoseconds, a celpy tree step a few microseconds. The budgets are therefore
counted in celpy's own steps (one per tree node visited) and sized by time, not copied:

- ``EVALUATION_STEPS`` for one selector on one device, the counterpart of the per-call
  cost limit;
- ``REVIEW_STEPS`` for all the selectors of one admission review, the counterpart of the
  API server's webhook timeout (``timeoutSeconds: 5`` in deploy/base/webhooks.yaml): a
  review spends at most a fraction of it in CEL.

Both are plain numbers, counted as the tree is walked: the engine reads no clock. Past a
budget the selector is not evaluated (``SelectorError.unsupported``), which is a warning,
never a denial.
"""

from __future__ import annotations

import contextvars
from typing import Any

# celpy takes 12 to 15 microseconds a step on this project's 2-core reference machine (a
# plain selector such as ``device.driver == "x" && device.attributes["x"].type == "gpu"`` is
# 50 steps). One selector on one device: about 70 ms.
EVALUATION_STEPS = 5_000
# Every selector of one review: about 0.7 s, a seventh of the API server's 5 s timeout,
# and room for a thousand plain evaluations (devices alike share one).
REVIEW_STEPS = 50_000
# Parsing an expression: lark takes about 6.5 microseconds a character, half a step.
COMPILE_CHARACTERS_PER_STEP = 2
# Sizes the estimate assumes for a collection it cannot count in the expression: the most
# entries an attribute or capacity map of a device holds
# (ResourceSliceMaxAttributesAndCapacitiesPerDevice), and for other lists (a split string)
# the most characters of a string attribute (DeviceAttributeMaxValueLength) plus one.
MAP_ENTRIES = 32
LIST_ITEMS = 65
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class Budget:
    """Steps left; shared by every evaluation of one review."""

    __slots__ = ("left",)

    def __init__(self, steps: int) -> None:
        self.left = steps


_REVIEW: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "cel_review_budget", default=None
)


class _ReviewScope:
    """``with review_budget():``, written out rather than through ``contextlib``: every
    review opens one, and a generator's context manager cost about a tenth of a typical
    pod's evaluation (bench/engine.py)."""

    __slots__ = ("_steps", "_token")

    def __init__(self, steps: int) -> None:
        self._steps = steps
        self._token: contextvars.Token[Budget | None] | None = None

    def __enter__(self) -> Budget:
        current = _REVIEW.get()
        if current is not None:  # an outer review of the same request: kept
            return current
        budget = Budget(self._steps)
        self._token = _REVIEW.set(budget)
        return budget

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            _REVIEW.reset(self._token)


def review_budget(steps: int = REVIEW_STEPS) -> _ReviewScope:
    """The CEL budget of one review, for every selector evaluated inside the block (one
    already open, from an outer review of the same request, is kept)."""
    return _ReviewScope(steps)


def open_review(steps: int = REVIEW_STEPS) -> contextvars.Token[Budget | None] | None:
    """``review_budget`` as two plain calls, for the engine's entry, which every review
    passes: ``open_review`` then, in a ``finally``, ``close_review`` of what it returned
    (half the cost of the ``with`` block, bench/engine.py)."""
    if _REVIEW.get() is not None:  # an outer review of the same request: kept
        return None
    return _REVIEW.set(Budget(steps))


def close_review(token: contextvars.Token[Budget | None] | None) -> None:
    if token is not None:
        _REVIEW.reset(token)


def current_review() -> Budget | None:
    return _REVIEW.get()


def review_spent() -> bool:
    """Whether this review's budget ran out: an answer found since then is true of this
    review only (selectors left unevaluated), so memos of the snapshot must not keep it."""
    budget = _REVIEW.get()
    return budget is not None and budget.left <= 0


class OutOfSteps(BaseException):
    """Raised from inside celpy's tree walk. A BaseException: celpy turns ``Exception``
    subclasses into CEL error values (and logs some), which would let the walk go on."""

    def __init__(self, which: str) -> None:
        super().__init__(which)
        self.which = which  # "expression" or "review"


class Meter:
    """Counts the steps of one evaluation against its own limit and the review's."""

    __slots__ = ("left", "review")

    def __init__(self, review: Budget | None, steps: int = EVALUATION_STEPS) -> None:
        self.left = steps
        self.review = review

    def step(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise OutOfSteps("expression")
        review = self.review
        if review is not None:
            review.left -= 1
            if review.left < 0:
                raise OutOfSteps("review")


def estimated_steps(tree: Any) -> int:
    """Worst-case tree steps of one evaluation, from the parse tree alone: every node once,
    a comprehension's body once per element of its range, ranges as long as their literal
    or, where the expression does not say, as the API's size bounds allow (``MAP_ENTRIES``
    for the device's maps, ``LIST_ITEMS`` otherwise). cel-go's estimator works the same
    way (``checker.CostEstimator``: the range's size times the body's cost)."""
    children = getattr(tree, "children", None)
    if children is None:
        return 0
    if tree.data == "member_dot_arg" and len(children) == 3:
        name = getattr(children[1], "value", "")
        if name in _MACROS:
            args = getattr(children[2], "children", ())
            body = estimated_steps(args[-1]) if args else 0
            return 1 + estimated_steps(children[0]) + _range_size(children[0]) * (body + 3)
    return 1 + sum(estimated_steps(child) for child in children)


def _range_size(tree: Any) -> int:
    """The number of elements a comprehension's range holds at most."""
    node = tree
    # Down the chains of one child (member -> primary -> list_lit) to what the range is.
    while getattr(node, "children", None) and len(node.children) == 1:
        if node.data in ("list_lit", "map_lit"):
            break
        node = node.children[0]
    data = getattr(node, "data", "")
    if data == "list_lit":
        items = node.children[0] if node.children else None
        return len(getattr(items, "children", ())) if items is not None else 0
    if data == "map_lit":
        inits = node.children[0] if node.children else None
        return len(getattr(inits, "children", ())) // 2 if inits is not None else 0
    if _reads_device(tree):
        return MAP_ENTRIES
    return LIST_ITEMS


def _reads_device(tree: Any) -> bool:
    if getattr(tree, "data", "") == "member_dot_arg":
        return False  # a method's result (split, map) is not one of the device's maps
    scan = getattr(tree, "scan_values", None)
    if scan is None:
        return False
    return any(getattr(token, "value", None) == "device" for token in scan(bool))
