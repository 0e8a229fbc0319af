"""Kubernetes resource quantities, exact and bounded as Kubernetes bounds them.

Quantities are kept as ``Fraction`` so that ``0.5``, ``500m`` and ``1.5`` are told apart
from whole numbers without floating-point doubt.

Bounds, from Kubernetes' ``resource.Quantity`` (k8s.io/apimachinery
pkg/api/resource/quantity.go, the type's doc comment): "no quantity may represent a number
greater than 2^63-1 in magnitude [...] Numbers larger or more precise will be capped or
rounded up", and ``ParseQuantity`` rounds every non-zero amount up (away from zero) to a
whole number of nano units (``amount.Round(amount, Nano.infScale(), inf.RoundUp)``). We
round the same way, and refuse a magnitude over 2^63-1 as out of range: a value that large
is a typo or an attack, and working it out exactly is what let ``1e20000000`` hold a worker
for seconds. The size of the exponent is judged from the digits before any arithmetic.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

MAX_MAGNITUDE = 2**63 - 1
NANO_DIGITS = 9
# Longer text is refused before any arithmetic: no real quantity needs it, and Python
# refuses to turn more than 4,300 digits into an int anyway.
MAX_TEXT = 1024
_DECIMAL_POWERS: dict[str, int] = {
    "": 0,
    "n": -9,
    "u": -6,
    "m": -3,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_POWERS: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?:(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]*))?|\.(?P<dotfrac>[0-9]+))"
    r"(?:(?P<suffix>[numkMGTPE]|[KMGTPE]i)|[eE](?P<exp>[+-]?[0-9]+))?$"
)
_CACHE: dict[object, Fraction] = {}
_CACHE_SIZE = 4096
_CACHED_TEXT = 64  # longer values are not remembered: they would make the cache big


class QuantityError(ValueError):
    """A value that Kubernetes would not accept as a resource quantity, or one beyond its
    range; the message shows the value (shortened) and says which."""


def parse_quantity(value: object) -> Fraction:
    """Parse what a manifest may hold: ``1``, ``"1"``, ``0.5``, ``"500m"``, ``"2Gi"``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"{shown(value)} is not a quantity")
    key = (type(value), value)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    result = _parse(value)
    if len(_CACHE) < _CACHE_SIZE and (not isinstance(value, str) or len(value) <= _CACHED_TEXT):
        _CACHE[key] = result
    return result


def whole_quantity(value: object) -> int | None:
    """The quantity as a whole number of units when it is one and not negative; ``None``
    for anything else, invalid included (``parse_quantity`` then says why).

    Device counts are read on every admission: this answers from ``parse_quantity``'s
    memo with integer tests, not ``Fraction`` comparisons, which cost more than the rest
    of reading a container.
    """
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return None
    whole = amount.numerator
    return whole if amount.denominator == 1 and whole >= 0 else None


def shown(value: object) -> str:
    """``repr(value)``, shortened: messages and logs quote values from untrusted input."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} characters)"


def _parse(value: str | int | float) -> Fraction:
    if isinstance(value, int):
        return _bounded(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{shown(value)} is not a quantity")
        return _bounded(_nano_ceiling(Fraction(str(value))), value)
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise QuantityError(f"{shown(value)} is out of range (over {MAX_TEXT} characters)")
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{shown(value)} is not a quantity")
    digits = (match["int"] or "") + (match["frac"] or match["dotfrac"] or "")
    power = -len(match["frac"] or match["dotfrac"] or "")
    binary = 0
    if match["exp"] is not None:
        power += _exponent(match["exp"], value)
    elif match["suffix"] in _BINARY_POWERS:
        binary = _BINARY_POWERS[match["suffix"]]
    else:
        power += _DECIMAL_POWERS[match["suffix"] or ""]
    significant = digits.lstrip("0")
    if not significant:
        return Fraction(0)
    # The value is at least 10**(len(significant) - 1 + power) * 2**binary: decide the
    # range from that before computing 10**power, which could take seconds.
    magnitude = len(significant) - 1 + power + binary * math.log10(2)
    if magnitude >= 19:  # 10**19 > 2**63 - 1
        raise QuantityError(f"{shown(value)} is out of range (at most 2^63-1)")
    if magnitude < -(NANO_DIGITS + 1):
        amount = Fraction(1, 10**NANO_DIGITS)  # below a nano unit: Kubernetes rounds up
    else:
        amount = _nano_ceiling(Fraction(int(significant)) * Fraction(10) ** power * 2**binary)
    return _bounded(-amount if match["sign"] == "-" else amount, value)


def _exponent(text: str, value: object) -> int:
    # Kubernetes reads the exponent as a 64-bit integer (strconv.ParseInt), or refuses it.
    if len(text.lstrip("+-").lstrip("0")) > 18:
        raise QuantityError(f"{shown(value)} is out of range (its exponent)")
    return int(text)


def _nano_ceiling(amount: Fraction) -> Fraction:
    """Rounded away from zero to a whole number of nano units, as Kubernetes does."""
    scaled = amount * 10**NANO_DIGITS
    if scaled.denominator == 1:
        return amount
    whole = math.ceil(abs(scaled))
    return Fraction(whole if amount > 0 else -whole, 10**NANO_DIGITS)


def _bounded(amount: Fraction, value: object) -> Fraction:
    if abs(amount) > MAX_MAGNITUDE:
        raise QuantityError(f"{shown(value)} is out of range (at most 2^63-1)")
    return amount


def format_quantity(value: Fraction) -> str:
    """Render a whole or milli quantity the way ``kubectl`` users write it."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(value))


def format_bytes(value: int) -> str:
    """Render bytes with the largest binary suffix that keeps the number whole."""
    for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
