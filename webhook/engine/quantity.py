"""Kubernetes resource quantities, exact.

Quantities are kept as ``Fraction`` so that ``0.5``, ``500m`` and ``1.5`` are told apart
from whole numbers without floating-point doubt.
"""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>[numkMGTPE]|[KMGTPE]i)|[eE](?P<exp>[+-]?[0-9]+))?$"
)
_CACHE: dict[object, Fraction] = {}


class QuantityError(ValueError):
    """A value that Kubernetes would not accept as a resource quantity."""


def parse_quantity(value: object) -> Fraction:
    """Parse what a manifest may hold: ``1``, ``"1"``, ``0.5``, ``"500m"``, ``"2Gi"``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"{value!r} is not a quantity")
    key = (type(value), value)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    result = _parse(value)
    if len(_CACHE) < 4096:
        _CACHE[key] = result
    return result


def _parse(value: object) -> Fraction:
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    number = Fraction(match["number"])
    if match["exp"] is not None:
        number *= Fraction(10) ** int(match["exp"])
    else:
        number *= _SUFFIXES[match["suffix"] or ""]
    return -number if match["sign"] == "-" else number


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
