"""What a DRA selector reads of a device, as plain values (semantic versions, quantities,
attributes of kinds not read), and the parser loaders the shell installs: apart from
``deviceselectors`` and ``celenvironment``, which both read them, so that neither imports
the other back."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

# Called once before celpy's environment is built: the shell may install celpy's parser
# from a cache there (``webhook.files.celparser``), as the engine itself reads no file.
_PARSER_LOADERS: list[Callable[[], None]] = []


def use_parser_loader(loader: Callable[[], None]) -> None:
    """Have ``loader`` run once, before the first selector is compiled."""
    _PARSER_LOADERS[:] = [loader]


def parser_loaders() -> tuple[Callable[[], None], ...]:
    return tuple(_PARSER_LOADERS)


SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic version attribute (``VersionValue``), ordered as semver 2.0 orders it."""

    text: str

    def key(self) -> tuple[Any, ...]:
        match = SEMVER.match(self.text)
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


@dataclass(frozen=True, slots=True)
class UnreadValue:
    """An attribute of a kind this webhook does not read (a list-valued attribute of
    1.36's ``DRAListTypeAttributes``, or a kind still to come): kept, so that a selector
    naming it is not a "no such member" error, but any use of it is not evaluated."""

    json: str


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


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of a device: its driver, attributes and capacity by domain."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Fraction]]
    # ``device.allowMultipleAllocations`` (compile.go, DRAConsumableCapacity): false when
    # the slice does not say.
    allow_multiple_allocations: bool = False
