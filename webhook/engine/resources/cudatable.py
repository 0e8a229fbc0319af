"""Images and the CUDA version they are built on: the shipped table of public images
(``webhook/data/cuda-images.yaml``, read by ``webhook.files.shipped``) and a rule file's
mappings, compiled once per policy. ``webhook.engine.demand.cuda`` says what a container
needs from it; the sources of every row are in the data file and docs/rules.md.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Version = tuple[int, ...]
# The tag NGC gives a framework release's main container (``nvcr.io/nvidia/pytorch:24.08-py3``).
DEFAULT_RELEASE_TAGS = ("-py3",)
_TAG_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-|$)")


def parse_version(text: object) -> Version | None:
    """``"12.2"`` -> (12, 2); leading ``v`` and missing parts allowed; None if not one."""
    if not isinstance(text, str):
        return None
    parts = text.strip().removeprefix("v").split(".")
    if not parts or len(parts) > 3 or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def cmp(a: Version, b: Version) -> int:
    width = max(len(a), len(b))
    left, right = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (left > right) - (left < right)


def text(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True, slots=True)
class ImageCUDA:
    """What an image is built on: its CUDA version, the driver branches it may still run
    on by forward compatibility (None: not known, so none is ruled out), and the source."""

    cuda: Version
    forward: tuple[Version, ...] | None
    source: str


@dataclass(frozen=True, slots=True)
class ForwardBranches:
    """The driver branches official CUDA images may still run on by forward compatibility,
    by the CUDA version (major.minor) of the image: the ``brand=...,driver>=N,driver<N+1``
    clauses of its ``NVIDIA_REQUIRE_CUDA``, which the toolkit ORs with ``cuda>=X.Y``.

    A version the table does not list gets every branch listed for its major release (the
    lists only shrink as versions grow, so that is never too few); a major with no list
    gets None (not known: no older major is called too old)."""

    by_version: Mapping[tuple[int, int], tuple[Version, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, raw: object) -> ForwardBranches:
        found: dict[tuple[int, int], tuple[Version, ...]] = {}
        if isinstance(raw, Mapping):
            for key, branches in raw.items():
                version = parse_version(str(key))
                if version is None or len(version) < 2 or not isinstance(branches, list):
                    continue
                found[(version[0], version[1])] = tuple(
                    v for v in (parse_version(str(b)) for b in branches) if v
                )
        return cls(found)

    def of_version(self, version: Version) -> tuple[Version, ...] | None:
        if len(version) < 2:
            version = (*version, 0)
        listed = self.by_version.get((version[0], version[1]))
        if listed is not None:
            return listed
        same_major = [
            b for (major, _), bs in self.by_version.items() if major == version[0] for b in bs
        ]
        return tuple(sorted(set(same_major))) if same_major else None


@dataclass(frozen=True, slots=True)
class CudaImages:
    """The shipped table of public images plus a rule file's mappings (which come first)."""

    rules: tuple[tuple[str, ImageCUDA], ...] = ()  # image glob -> CUDA
    # Repositories whose tag says the version, their forward-compatible branches by the
    # version the tag names, and the source.
    tagged: tuple[tuple[frozenset[str], ForwardBranches, str], ...] = ()
    # (repository, tag) -> CUDA: only the tags a release's notes describe (``24.08-py3``),
    # not variants built otherwise (``24.08-trtllm-python-py3``, ``-igpu``).
    releases: Mapping[tuple[str, str], ImageCUDA] | None = None

    @classmethod
    def of(cls, table: Mapping[str, Any], rules: Iterable[Mapping[str, Any]] = ()) -> CudaImages:
        """From plain data: the shipped table (``webhook/data/cuda-images.yaml``) and
        GPUSettings ``cudaImages`` entries, already checked against their schemas."""
        tagged = tuple(
            (
                frozenset(str(repo) for repo in row.get("repositories") or ()),
                ForwardBranches.of(row.get("forward")),
                str(row.get("source", "")),
            )
            for row in table.get("tagged") or ()
        )
        # A private image is most often built FROM an official CUDA image and keeps its
        # forward-compatibility clauses: the same branches count (none known: None).
        inherited = tagged[0][1] if tagged else ForwardBranches()
        compiled_rules = []
        for r in rules:
            wanted = parse_version(str(r["cuda"])) or (0,)
            found = ImageCUDA(
                wanted, inherited.of_version(wanted), f"rule file cudaImages {r['image']}"
            )
            compiled_rules.append((str(r["image"]), found))
        releases = {}
        for row in table.get("releases") or ():
            version = parse_version(str(row.get("cuda")))
            if version is None:
                continue
            forward = row.get("forward")
            found = ImageCUDA(
                version,
                None
                if forward is None
                else tuple(v for v in (parse_version(f) for f in forward) if v),
                str(row.get("source", "")),
            )
            for suffix in row.get("tags") or DEFAULT_RELEASE_TAGS:
                releases[(str(row["repository"]), f"{row['release']}{suffix}")] = found
        return cls(tuple(compiled_rules), tagged, releases)

    def lookup(self, image: str) -> ImageCUDA | None:
        """The image's CUDA, memoised per table and image (pods repeat a few images)."""
        key = (id(self), image)
        hit = _LOOKUPS.get(key)
        if hit is not None and hit[0] is self:
            return hit[1]
        found = self._lookup(image)
        if len(_LOOKUPS) >= 4096:
            _LOOKUPS.clear()
        _LOOKUPS[key] = (self, found)
        return found

    def _lookup(self, image: str) -> ImageCUDA | None:
        for pattern, found in self.rules:
            if fnmatch.fnmatchcase(image, pattern):
                return found
        repository, tag = _split(image)
        if not tag:
            return None  # "latest" says nothing of the version
        for repositories, forward, source in self.tagged:
            if repository in repositories:
                match = _TAG_VERSION.match(tag)
                if match:
                    version = tuple(int(g) for g in match.groups() if g is not None)
                    return ImageCUDA(version, forward.of_version(version), f"{image}: {source}")
        if self.releases:
            return self.releases.get((repository, tag))
        return None


_LOOKUPS: dict[tuple[int, str], tuple[CudaImages, ImageCUDA | None]] = {}


def _split(image: str) -> tuple[str, str]:
    """Repository and tag; a digest leaves no tag (it names no version)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, ""
