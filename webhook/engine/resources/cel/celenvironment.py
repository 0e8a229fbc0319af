"""Kubernetes' CEL environment for DRA selectors, built on celpy.

``webhook.engine.resources.cel.deviceselectors`` imports this module only when a selector is
first compiled: celpy and its lark parser cost a CLI start a few hundred milliseconds that
most commands never need (issue 36).

What Kubernetes' environment holds (``k8s.io/apiserver/pkg/cel/environment/base.go``,
``baseOpts``, at the compatibility version of 1.34 and later; plus what
``k8s.io/dynamic-resource-allocation/cel/compile.go``, ``newCompiler``, adds) and what this
module gives of it:

- the standard definitions, with ``cel.CrossTypeNumericComparisons`` (``1 < 2.5``,
  ``2u > 1``, ``1 == 1.0``): here;
- ``ext.Strings(StringsVersion(2))``: ``charAt``, ``indexOf``, ``lastIndexOf``,
  ``lowerAscii``, ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``, ``join``,
  ``strings.quote``: here (``format`` is not);
- ``library.Lists``: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``:
  here;
- ``cel.OptionalTypes``: ``optional.of``, ``optional.none``, ``optional.ofNonZeroValue``,
  ``.?field``, ``[?key]``, ``hasValue``, ``value``, ``orValue``, ``or``: here (celpy's
  grammar lacks the ``.?`` and ``[?`` syntax, so the text is rewritten into calls first);
- ``library.Regex`` (``find``, ``findAll``) with RE2, as cel-go: here;
- ``ext.Sets`` (``sets.contains``, ``sets.equivalent``, ``sets.intersects``): here;
- ``library.Quantity`` and ``library.SemverLib`` (version 1: ``semver(s, normalize)``):
  here;
- the ``device`` variable with ``driver``, ``attributes``, ``capacity`` and
  ``allowMultipleAllocations``: here (list-valued attributes, ``EnableListTypeAttributes``
  of 1.36, are not read from slices);
- ``ext.Bindings`` (``cel.bind``), ``ext.TwoVarComprehensions``, ``library.URLs``,
  ``library.IP``, ``library.CIDR``, ``library.Format``, ``library.Image``: not here. An
  expression using them is *not evaluated* (a warning naming the selector), never read
  as "no device matches".
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import celpy
import re2  # type: ignore[import-untyped]
from celpy import celtypes
from celpy.evaluation import CELEvalError, Evaluator, base_functions

from webhook.engine.kube.quantity import QuantityError, parse_quantity
from webhook.engine.resources.cel.celbudget import Meter
from webhook.engine.resources.cel.values import (
    SEMVER,
    DeviceView,
    QuantityValue,
    SemverValue,
    UnreadValue,
    Version,
    parser_loaders,
)

_NUMBERS = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


class _DomainMap(celtypes.MapType):
    """A domain the device does not have reads as an empty map, as in Kubernetes."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


class OptionalValue:
    """``optional_type``: a value or none (cel-go's ``types.Optional``)."""

    __slots__ = ("present", "value")

    def __init__(self, value: Any = None, *, present: bool) -> None:
        self.value = value
        self.present = present

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


_NONE = OptionalValue(present=False)


class Namespace:
    """``optional``, ``sets``, ``strings``: names whose functions are called as methods."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_NAMESPACES = {name: Namespace(name) for name in ("optional", "sets", "strings")}


class _Unread:
    """What a selector sees of an ``UnreadValue``: every operator and function refuses it
    (a TypeError, which celpy reports as "no such overload"), so its use is not evaluated."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "an attribute of a kind this webhook does not read"


# --- numbers: CrossTypeNumericComparisons -------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBERS) and not isinstance(value, celtypes.BoolType)


def _plain(value: Any) -> int | float:
    """celpy's numbers refuse to compare across types; Python's compare int and float
    exactly, as cel-go's cross-type comparison does."""
    return float(value) if isinstance(value, celtypes.DoubleType) else int(value)


def _ordering(base: Callable[[Any, Any], Any], op: Callable[[Any, Any], bool]) -> Any:
    def compare(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        if _is_number(a) and _is_number(b):
            return celtypes.BoolType(op(_plain(a), _plain(b)))
        return base(a, b)

    return compare


def _equality(negate: bool) -> Callable[[Any, Any], Any]:
    def equal(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        return celtypes.BoolType(_equal(a, b) != negate)

    return equal


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, _Unread) or isinstance(b, _Unread):
        raise TypeError("no such overload: an attribute of a kind this webhook does not read")
    if _is_number(a) and _is_number(b):
        return _plain(a) == _plain(b)
    if isinstance(a, QuantityValue) and isinstance(b, QuantityValue):
        return a.value == b.value
    if isinstance(a, SemverValue) and isinstance(b, SemverValue):
        return a.version.key() == b.version.key()
    if isinstance(a, OptionalValue) and isinstance(b, OptionalValue):
        return a.present == b.present and (not a.present or _equal(a.value, b.value))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False  # heterogeneous equality: false, not an error
    return bool(a == b)


def _in(item: Any, container: Any) -> Any:
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if isinstance(container, list):
        return celtypes.BoolType(any(_equal(item, x) for x in container))
    if isinstance(container, dict) and _is_number(item):
        return celtypes.BoolType(any(_equal(item, k) for k in container))
    return base_functions["_in_"](item, container)


# --- strings: ext.Strings version 2 -------------------------------------------------


def _s(value: Any) -> celtypes.StringType:
    return celtypes.StringType(value)


def _index_of(target: Any, needle: Any, offset: Any = 0) -> celtypes.IntType:
    if isinstance(target, list):
        return celtypes.IntType(next((i for i, x in enumerate(target) if _equal(x, needle)), -1))
    if not 0 <= int(offset) <= len(target):
        raise ValueError(f"index out of range: {offset}")
    return celtypes.IntType(str(target).find(str(needle), int(offset)))


def _last_index_of(target: Any, needle: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        found = [i for i, x in enumerate(target) if _equal(x, needle)]
        return celtypes.IntType(found[-1] if found else -1)
    end = len(target) if offset is None else int(offset) + len(needle)
    return celtypes.IntType(str(target).rfind(str(needle), 0, end))


def _substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    stop = len(text) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(text):
        raise ValueError(f"index out of range: {start}, {stop}")
    return _s(str(text)[int(start) : stop])


def _char_at(text: Any, index: Any) -> celtypes.StringType:
    if not 0 <= int(index) <= len(text):
        raise ValueError(f"index out of range: {index}")
    return _s(str(text)[int(index) : int(index) + 1])


def _replace(text: Any, old: Any, new: Any, count: Any = -1) -> celtypes.StringType:
    return _s(str(text).replace(str(old), str(new), int(count)))


def _split(text: Any, separator: Any, limit: Any = -1) -> celtypes.ListType:
    limit = int(limit)
    if limit == 0:
        return celtypes.ListType([])
    text, separator = str(text), str(separator)
    if separator == "":
        parts = list(text) if limit < 0 else [*text[: limit - 1], text[limit - 1 :]]
    else:
        parts = text.split(separator, limit - 1 if limit > 0 else -1)
    return celtypes.ListType([_s(p) for p in parts])


def _join(items: Any, separator: Any = "") -> celtypes.StringType:
    return _s(str(separator).join(str(i) for i in items))


def _trim(text: Any) -> celtypes.StringType:
    # Go's strings.TrimSpace: Unicode white space, as Python's strip.
    return _s(str(text).strip())


def _ascii(text: Any, *, upper: bool) -> celtypes.StringType:
    table = str.maketrans(
        "abcdefghijklmnopqrstuvwxyz" if upper else "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if upper else "abcdefghijklmnopqrstuvwxyz",
    )
    return _s(str(text).translate(table))


def _quote(namespace: Any, text: Any = None) -> celtypes.StringType:
    value = text if isinstance(namespace, Namespace) else namespace
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return _s('"' + escaped.replace("\n", "\\n").replace("\t", "\\t") + '"')


# --- lists: library.Lists, ext.Sets ---------------------------------------------------


def _is_sorted(items: Any) -> celtypes.BoolType:
    return celtypes.BoolType(all(not (b < a) for a, b in itertools.pairwise(items)))


def _sum(items: Any) -> Any:
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def _max(items: Any, *more: Any) -> Any:
    values = [items, *more] if more else list(items)
    if not values:
        raise ValueError("max of an empty list")
    return max(values)


def _contains(target: Any, *args: Any) -> Any:
    if isinstance(target, Namespace):  # sets.contains(list, sublist)
        whole, part = args
        return celtypes.BoolType(all(any(_equal(p, w) for w in whole) for p in part))
    return base_functions["contains"](target, *args)


def _equivalent(_namespace: Namespace, a: Any, b: Any) -> celtypes.BoolType:
    inside = all(any(_equal(x, y) for y in b) for x in a)
    return celtypes.BoolType(inside and all(any(_equal(y, x) for x in a) for y in b))


def _intersects(_namespace: Namespace, a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(any(_equal(x, y) for x in a for y in b))


# --- regex: library.Regex, RE2 as cel-go --------------------------------------------


def _find(text: Any, pattern: Any) -> celtypes.StringType:
    match = re2.search(str(pattern), str(text))
    return _s(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = -1) -> celtypes.ListType:
    found = [_s(m.group(0)) for m in re2.finditer(str(pattern), str(text))]
    return celtypes.ListType(found if int(limit) < 0 else found[: int(limit)])


# --- optional types -----------------------------------------------------------------


def _of(_namespace: Namespace, value: Any) -> OptionalValue:
    return OptionalValue(value, present=True)


def _none(_namespace: Namespace) -> OptionalValue:
    return _NONE


def _zero(value: Any) -> bool:
    if isinstance(value, str | list | dict | bytes):
        return len(value) == 0
    if isinstance(value, int | float):
        return value == 0
    return False


def _of_non_zero(_namespace: Namespace, value: Any) -> OptionalValue:
    return _NONE if _zero(value) else OptionalValue(value, present=True)


def _opt_select(target: Any, key: Any) -> OptionalValue:
    """``target.?key`` and ``target[?key]``: the entry if the map has it."""
    if isinstance(target, OptionalValue):
        if not target.present:
            return _NONE
        target = target.value
    if isinstance(target, _DomainMap):
        return OptionalValue(target[key], present=True)  # every domain is there, maybe empty
    if isinstance(target, dict):
        return OptionalValue(target[key], present=True) if key in target else _NONE
    if isinstance(target, list) and _is_number(key):
        index = int(key)
        return OptionalValue(target[index], present=True) if 0 <= index < len(target) else _NONE
    raise TypeError(f"no such overload: optional selection on {type(target).__name__}")


def _has_value(value: OptionalValue) -> celtypes.BoolType:
    return celtypes.BoolType(value.present)


def _value(value: OptionalValue) -> Any:
    if not isinstance(value, OptionalValue):
        raise TypeError("value() of a non-optional")
    if not value.present:
        raise KeyError("optional.none() dereference")
    return value.value


def _or_value(value: OptionalValue, default: Any) -> Any:
    return value.value if value.present else default


def _or(value: OptionalValue, other: OptionalValue) -> OptionalValue:
    return value if value.present else other


# --- quantity and semver (library.Quantity, library.SemverLib v1) ---------------------


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


def _normalized(text: str) -> str:
    """``semver(s, true)``: a leading v dropped, a missing minor or patch taken as 0
    (``library.SemverLib`` version 1, ``normalizeVersion``)."""
    text = text.removeprefix("v")
    core, sep, rest = text.partition("-") if "-" in text else text.partition("+")
    parts = core.split(".")
    while len(parts) < 3:
        parts.append("0")
    parts = [p.lstrip("0") or "0" for p in parts]
    return ".".join(parts) + sep + rest


def _semver(text: Any, normalize: Any = False) -> SemverValue:
    value = _normalized(str(text)) if normalize else str(text)
    if not SEMVER.match(value):
        raise ValueError(f"semver({text!r}): not a semantic version")
    return SemverValue(Version(value))


def _is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    value = _normalized(str(text)) if normalize else str(text)
    return celtypes.BoolType(bool(SEMVER.match(value)))


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


def _amount(value: Any) -> Fraction:
    return value.value if isinstance(value, QuantityValue) else Fraction(value)


def _version_part(index: int) -> Callable[[SemverValue], celtypes.IntType]:
    def part(v: SemverValue) -> celtypes.IntType:
        return celtypes.IntType(v.version.key()[index])

    return part


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    # CrossTypeNumericComparisons and heterogeneous equality.
    "_<_": _ordering(base_functions["_<_"], lambda a, b: a < b),
    "_<=_": _ordering(base_functions["_<=_"], lambda a, b: a <= b),
    "_>_": _ordering(base_functions["_>_"], lambda a, b: a > b),
    "_>=_": _ordering(base_functions["_>=_"], lambda a, b: a >= b),
    "_==_": _equality(negate=False),
    "_!=_": _equality(negate=True),
    "_in_": _in,
    # ext.Strings v2, library.Lists, ext.Sets, library.Regex.
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda text: _ascii(text, upper=False),
    "upperAscii": lambda text: _ascii(text, upper=True),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": _trim,
    "join": _join,
    "quote": _quote,
    "isSorted": _is_sorted,
    "sum": _sum,
    "max": _max,
    "contains": _contains,
    "equivalent": _equivalent,
    "intersects": _intersects,
    "find": _find,
    "findAll": _find_all,
    # Optional types.
    "of": _of,
    "none": _none,
    "ofNonZeroValue": _of_non_zero,
    "optSelect": _opt_select,
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
    "or": _or,
    # library.Quantity, library.SemverLib.
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "add": lambda a, b: QuantityValue(a.value + _amount(b)),
    "sub": lambda a, b: QuantityValue(a.value - _amount(b)),
    "sign": lambda a: celtypes.IntType((a.value > 0) - (a.value < 0)),
    "isInteger": lambda a: celtypes.BoolType(a.value.denominator == 1),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(a.value)),
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
}


class _MeteredEvaluator(Evaluator):
    """celpy's tree walk with one step counted per node (comprehension bodies, which
    celpy evaluates with sub-evaluators, included)."""

    def __init__(self, ast: Any, activation: Any, meter: Meter) -> None:
        super().__init__(ast, activation)
        self.meter = meter

    def sub_evaluator(self, ast: Any) -> Evaluator:
        return _MeteredEvaluator(ast, self.activation, self.meter)

    def _visit_tree(self, tree: Any) -> Any:
        self.meter.step()
        return super()._visit_tree(tree)


class Program:
    """One compiled selector: its parse tree and functions, evaluated under a meter."""

    def __init__(self, runner: celpy.Runner) -> None:
        self._runner = runner

    @property
    def tree(self) -> Any:
        return self._runner.ast

    def evaluate(self, device: DeviceView, meter: Meter) -> Any:
        evaluator = _MeteredEvaluator(self._runner.ast, self._runner.new_activation(), meter)
        context: dict[str, Any] = {"device": activation(device), **_NAMESPACES}
        return evaluator.evaluate(context)


@functools.cache
def _environment() -> celpy.Environment:
    for load in parser_loaders():
        load()
    limit = sys.getrecursionlimit()
    environment = celpy.Environment()  # sets the recursion limit: deviceselectors did
    sys.setrecursionlimit(limit)
    return environment


def compile_program(text: str) -> Program:
    """Parse and bind; raises celpy's CELParseError for text it cannot parse."""
    environment = _environment()
    return Program(environment.program(environment.compile(text), functions=dict(FUNCTIONS)))


def _cel_value(raw: Any) -> Any:
    if isinstance(raw, UnreadValue):
        return _Unread()
    if isinstance(raw, bool):
        return celtypes.BoolType(raw)
    if isinstance(raw, int):
        return celtypes.IntType(raw)
    if isinstance(raw, Version):
        return SemverValue(raw)
    return celtypes.StringType(str(raw))


def activation(device: DeviceView) -> celtypes.MapType:
    s = celtypes.StringType
    attributes = _DomainMap(
        {
            s(domain): celtypes.MapType({s(k): _cel_value(v) for k, v in values.items()})
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
        {
            s("driver"): s(device.driver),
            s("allowMultipleAllocations"): celtypes.BoolType(device.allow_multiple_allocations),
            s("attributes"): attributes,
            s("capacity"): capacity,
        }
    )


def is_bool(value: Any) -> bool:
    return isinstance(value, bool | celtypes.BoolType)


def desugar(text: str) -> str:
    """``a.?b`` as ``a.optSelect('b')`` and ``a[?k]`` as ``a.optSelect(k)``: celpy's
    grammar has no optional selection. String literals are copied as they are; a ``[?``
    that opens a list literal (an optional element) is left, and fails to parse."""
    out: list[str] = []
    closers: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char in "'\"":
            end = _string_end(text, i)
            out.append(text[i:end])
            i = end
            continue
        if char == "." and text.startswith(".?", i):
            j = i + 2
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            if j > i + 2:
                out.append(f".optSelect('{text[i + 2 : j]}')")
                i = j
                continue
        if char == "[":
            indexing = bool(out) and _ends_operand("".join(out[-3:]))
            if indexing and text.startswith("[?", i):
                out.append(".optSelect(")
                closers.append(")")
                i += 2
                continue
            closers.append("]")
        elif char == "]" and closers:
            out.append(closers.pop())
            i += 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _ends_operand(before: str) -> bool:
    stripped = before.rstrip()
    return bool(stripped) and (stripped[-1].isalnum() or stripped[-1] in "_)]'\"")


def _string_end(text: str, start: int) -> int:
    """The index after the string literal starting at ``start`` (triple quotes too)."""
    quote = text[start]
    triple = text.startswith(quote * 3, start)
    delimiter = quote * 3 if triple else quote
    i = start + len(delimiter)
    raw = start > 0 and text[start - 1] in "rR"
    while i < len(text):
        if text[i] == "\\" and not raw:
            i += 2
            continue
        if text.startswith(delimiter, i):
            return i + len(delimiter)
        i += 1
    return len(text)
