"""CEL device selectors, evaluated as Kubernetes' DRA allocator evaluates them.

The environment follows ``k8s.io/dynamic-resource-allocation/cel/compile.go``: one
variable ``device`` with ``driver``, ``attributes`` and ``capacity``. Attributes and
capacities are maps of domain to map of name; a name without a domain belongs to the
device's driver (``parseQualifiedName``), and looking up a domain the device does not
have yields an empty map (``newStringInterfaceMapWithDefault``), so
``"x" in device.attributes["other.example.com"]`` is false, not an error. Capacities are
quantities and version attributes are semantic versions, with the methods of the
Kubernetes quantity and semver CEL libraries (``k8s.io/apiserver/pkg/cel/library``).

Each expression is compiled once per process (``compile_selector`` is memoised): the
allocator does the same with its CEL cache (``structured/celcache.go``), and admission
cannot afford a parse per request. celpy itself is imported on the first compile
(``webhook.engine.resources.cel.celenvironment``, which also lists what of Kubernetes' CEL
libraries it gives): a command that evaluates no selector never pays for it.

Evaluation is bounded (``webhook.engine.resources.cel.celbudget``): an expression whose
estimated cost is past the budget is not evaluated at all, and an evaluation stops at its
own step limit or at the review's. Any answer this webhook cannot be sure of (a function or
syntax its library lacks, a type its library handles differently, a spent budget) is a
``SelectorError`` with ``unsupported`` set: the fit is then unknown and the pod is warned,
never denied. Only the runtime errors cel-go raises for the device itself (a missing key,
a division by zero) fail a device, as they fail the allocation on that node.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING

from webhook.engine.resources.cel.celbudget import (
    COMPILE_CHARACTERS_PER_STEP,
    EVALUATION_STEPS,
    REVIEW_STEPS,
    Meter,
    OutOfSteps,
    current_review,
    estimated_steps,
)
from webhook.engine.resources.cel.values import (
    DeviceView,
)

if TYPE_CHECKING:
    from webhook.engine.resources.cel.celenvironment import Program

# celpy raises the recursion limit to 2,500 when its environment is built (for deeply
# nested expressions); done here, at import as it always was, so that building the
# environment later, on the first selector, changes nothing process-wide mid-run.
CEL_RECURSION_LIMIT = 2500
sys.setrecursionlimit(max(sys.getrecursionlimit(), CEL_RECURSION_LIMIT))

# Runtime errors cel-go raises as well, for what the device holds (a missing attribute, a
# division by zero): the allocator fails the node on them. Any other error may come from
# celpy differing from cel-go, so it leaves the answer unknown.
_DEVICE_ERRORS = ("no such key", "no such member", "divide by zero", "modulus by zero")
_CELPY_RULE = re.compile(r"Token\('RULE', '(\w+)'\)")
_CELPY_TYPE = re.compile(r"<class 'celpy\.celtypes\.(\w+)Type'>")
# Comprehension macros can read every attribute of a device without naming it.
_MACROS = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(|\bsize\s*\(")


class SelectorError(Exception):
    """An expression this webhook cannot compile or evaluate.

    ``unsupported`` is true when the cause is a gap in this webhook's CEL library rather
    than the expression or the device: the answer is then unknown, not "no match".
    """

    def __init__(self, message: str, *, unsupported: bool, spent: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported
        # The review's budget ran out: true of this review only, so never memoised.
        self.spent = spent


class Selector:
    """One compiled expression. ``matches`` raises ``SelectorError`` where the allocator
    would report a CEL runtime error (which fails the allocation on that node), or where
    this webhook cannot tell (``unsupported``)."""

    def __init__(self, expression: str) -> None:
        from celpy.celparser import CELParseError

        from webhook.engine.resources.cel.celenvironment import compile_program, desugar

        self.expression = expression
        try:
            self._program: Program = compile_program(desugar(expression))
        except CELParseError as exc:
            # The API server compiled it (validateCELSelector) before storing the claim,
            # so a parse failure here is this webhook's grammar, not the user's error.
            raise SelectorError(
                f"cannot be parsed here: {_first_line(exc)}", unsupported=True
            ) from None
        except Exception as exc:  # celpy raises several types for what it cannot handle
            raise SelectorError(
                f"cannot be compiled here: {_first_line(exc)}", unsupported=True
            ) from None
        try:
            self.cost = estimated_steps(self._program.tree)
        except RecursionError:
            raise SelectorError("not evaluated: nested too deeply", unsupported=True) from None
        if self.cost > REVIEW_STEPS:
            raise SelectorError(
                f"too costly to evaluate: about {self.cost} steps per device at worst, past "
                f"the budget of {REVIEW_STEPS} per review",
                unsupported=True,
            )
        # Whether the answer can depend on more than the attributes it names.
        self.reads_everything = bool(_MACROS.search(expression))

    def mentions(self, name: str) -> bool:
        return name in self.expression

    def matches(self, device: DeviceView) -> bool:
        from celpy.evaluation import CELEvalError

        from webhook.engine.resources.cel.celenvironment import is_bool

        review = current_review()
        if review is not None and review.left <= 0:
            raise _spent()
        try:
            result = self._program.evaluate(device, Meter(review))
        except OutOfSteps as exc:
            if exc.which == "review":
                raise _spent() from None
            raise SelectorError(
                f"not evaluated: past its budget of {EVALUATION_STEPS} steps on one device",
                unsupported=True,
            ) from None
        except CELEvalError as exc:
            raise _runtime_error(_first_line(exc)) from None
        except RecursionError:
            raise SelectorError("not evaluated: nested too deeply", unsupported=True) from None
        except Exception as exc:  # celpy's own failures: never a verdict on the device
            raise SelectorError(_first_line(exc), unsupported=True) from None
        if isinstance(result, CELEvalError):
            raise _runtime_error(_first_line(result))
        if not is_bool(result):
            raise SelectorError(
                f"evaluates to {type(result).__name__}, not bool", unsupported=False
            )
        return bool(result)


def _runtime_error(message: str) -> SelectorError:
    return SelectorError(message, unsupported=not any(e in message for e in _DEVICE_ERRORS))


def _spent() -> SelectorError:
    return SelectorError(
        f"not evaluated: the review's CEL budget ({REVIEW_STEPS} steps) is spent",
        unsupported=True,
        spent=True,
    )


def _first_line(exc: BaseException) -> str:
    args = exc.args
    text = str(args[0]) if args else str(exc)
    # celpy appends its whole activation to an undeclared reference, and names rules and
    # types by their Python reprs: not for users.
    text = text.split(" (in activation", 1)[0]
    text = _CELPY_TYPE.sub(r"\1", _CELPY_RULE.sub(r"\1", text))
    return text.splitlines()[0][:160] if text else type(exc).__name__


_COMPILED: OrderedDict[str, Selector | SelectorError] = OrderedDict()
_COMPILED_MAX = 1024


def compile_selector(expression: str) -> Selector | SelectorError:
    """The compiled expression, or why it cannot be used; once per process.

    Parsing costs about as much as evaluating (lark takes some 65 ms for the 10,240
    characters an expression may have), so a compile is charged to the review's budget
    too, a step per ``COMPILE_CHARACTERS_PER_STEP`` characters: a claim of hundreds of
    long distinct selectors cannot hold a worker for seconds either."""
    known = _COMPILED.get(expression)
    if known is not None:
        # Server threads share the cache: another may have just pushed this one out.
        with contextlib.suppress(KeyError):
            _COMPILED.move_to_end(expression)
        return known
    review = current_review()
    charge = 1 + len(expression) // COMPILE_CHARACTERS_PER_STEP
    if review is not None:
        if review.left < charge:
            return _spent()  # not kept: the next review may compile it
        review.left -= charge
    try:
        result: Selector | SelectorError = Selector(expression)
    except SelectorError as exc:
        result = exc
    _COMPILED[expression] = result
    while len(_COMPILED) > _COMPILED_MAX:
        with contextlib.suppress(KeyError):
            _COMPILED.popitem(last=False)
    return result
