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
cannot afford a parse per request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from webhook.engine.kube.quantity import QuantityError, parse_quantity

# CEL errors that come from this webhook's CEL library lacking something Kubernetes has
# (a function, a macro such as cel.bind), not from the device or the expression.
_UNSUPPORTED = ("undeclared reference", "unsupported", "not implemented")
# Comprehension macros can read every attribute of a device without naming it.
_MACROS = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(|\bsize\s*\(")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


class SelectorError(Exception):
    """An expression this webhook cannot compile or evaluate.

    ``unsupported`` is true when the cause is a gap in this webhook's CEL library rather
    than the expression or the device: the answer is then unknown, not "no match".
    """

    def __init__(self, message: str, *, unsupported: bool) -> None:
        super().__init__(message)
        self.unsupported = unsupported


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic version attribute (``VersionValue``), ordered as semver 2.0 orders it."""

    text: str

    def key(self) -> tuple[Any, ...]:
        match = _SEMVER.match(self.text)
        if match is None:
            return (0, 0, 0, 1, ())
        major, minor, patch, pre = match.groups()
        prerelease: tuple[Any, ...] = ()
        if pre:
            prerelease = tuple(
                (0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")
            )
        # A release sorts after every pre-release of the same version.
        return (int(major), int(minor), int(patch), 0 if pre else 1, prerelease)


class QuantityValue:
    """A capacity: compared with the quantity library's methods, never with ``==``."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"quantity({self.value})"


class SemverValue:
    __slots__ = ("version",)

    def __init__(self, version: Version) -> None:
        self.version = version

    def __repr__(self) -> str:
        return f"semver({self.version.text})"


class _DomainMap(celtypes.MapType):
    """A domain the device does not have reads as an empty map, as in Kubernetes."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, QuantityValue) and isinstance(b, QuantityValue):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, SemverValue) and isinstance(b, SemverValue):
        left, right = a.version.key(), b.version.key()
        return (left > right) - (left < right)
    raise TypeError(f"no matching overload: cannot compare {a!r} with {b!r}")


def _quantity(text: Any) -> QuantityValue:
    try:
        return QuantityValue(parse_quantity(str(text)))
    except QuantityError as exc:
        raise ValueError(f"quantity({text!r}): {exc}") from None


def _semver(text: Any) -> SemverValue:
    if not _SEMVER.match(str(text)):
        raise ValueError(f"semver({text!r}): not a semantic version")
    return SemverValue(Version(str(text)))


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _as_integer(q: QuantityValue) -> celtypes.IntType:
    if q.value.denominator != 1:
        raise ValueError(f"{q!r} is not an integer")
    return celtypes.IntType(q.value.numerator)


def _version_part(index: int) -> Callable[[SemverValue], celtypes.IntType]:
    def part(v: SemverValue) -> celtypes.IntType:
        return celtypes.IntType(v.version.key()[index])

    return part


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": lambda text: celtypes.BoolType(bool(_SEMVER.match(str(text)))),
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "add": lambda a, b: QuantityValue(a.value + (b.value if isinstance(b, QuantityValue) else b)),
    "sub": lambda a, b: QuantityValue(a.value - (b.value if isinstance(b, QuantityValue) else b)),
    "sign": lambda a: celtypes.IntType((a.value > 0) - (a.value < 0)),
    "isInteger": lambda a: celtypes.BoolType(a.value.denominator == 1),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(a.value)),
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
}
_ENVIRONMENT = celpy.Environment()


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of a device: its driver, attributes and capacity by domain."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Fraction]]


class Selector:
    """One compiled expression. ``matches`` raises ``SelectorError`` where the allocator
    would report a CEL runtime error (which fails the allocation on that node)."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        try:
            self._program = _ENVIRONMENT.program(
                _ENVIRONMENT.compile(expression), functions=dict(FUNCTIONS)
            )
        except CELParseError as exc:
            raise SelectorError(
                f"does not compile: {_first_line(exc)}", unsupported=False
            ) from None
        except Exception as exc:  # celpy raises several types for what it cannot handle
            raise SelectorError(
                f"cannot be compiled here: {_first_line(exc)}", unsupported=True
            ) from None
        # Whether the answer can depend on more than the attributes it names.
        self.reads_everything = bool(_MACROS.search(expression))

    def mentions(self, name: str) -> bool:
        return name in self.expression

    def matches(self, device: DeviceView) -> bool:
        try:
            result = self._program.evaluate({"device": _activation(device)})
        except CELEvalError as exc:
            message = _first_line(exc)
            unsupported = any(word in message for word in _UNSUPPORTED)
            raise SelectorError(message, unsupported=unsupported) from None
        except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:
            raise SelectorError(_first_line(exc), unsupported=False) from None
        if isinstance(result, CELEvalError):
            raise SelectorError(_first_line(result), unsupported=False)
        if not isinstance(result, bool | celtypes.BoolType):
            raise SelectorError(
                f"evaluates to {type(result).__name__}, not bool", unsupported=False
            )
        return bool(result)


def _first_line(exc: BaseException) -> str:
    args = exc.args
    text = str(args[0]) if args else str(exc)
    return text.splitlines()[0][:160] if text else type(exc).__name__


@functools.lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Selector | SelectorError:
    """The compiled expression, or why it cannot be used; once per process."""
    try:
        return Selector(expression)
    except SelectorError as exc:
        return exc


def _value(raw: Any) -> Any:
    if isinstance(raw, bool):
        return celtypes.BoolType(raw)
    if isinstance(raw, int):
        return celtypes.IntType(raw)
    if isinstance(raw, Version):
        return SemverValue(raw)
    return celtypes.StringType(str(raw))


def _activation(device: DeviceView) -> celtypes.MapType:
    s = celtypes.StringType
    attributes = _DomainMap(
        {
            s(domain): celtypes.MapType({s(k): _value(v) for k, v in values.items()})
            for domain, values in device.attributes.items()
        }
    )
    capacity = _DomainMap(
        {
            s(domain): celtypes.MapType({s(k): QuantityValue(v) for k, v in values.items()})
            for domain, values in device.capacity.items()
        }
    )
    return celtypes.MapType(
        {s("driver"): s(device.driver), s("attributes"): attributes, s("capacity"): capacity}
    )
