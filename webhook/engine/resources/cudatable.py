"""Images and the CUDA version they are built on: the shipped table of public images
(``webhook/data/cuda-images.yaml``, read by ``webhook.files.cudaimages``) and a rule file's
mappings, compiled once per policy. ``webhook.engine.demand.cuda`` says what a container
needs from it; the sources of every row are in the data file and docs/rules.md.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
class CudaImages:
    """The shipped table of public images plus a rule file's mappings (which come first)."""

    rules: tuple[tuple[str, ImageCUDA], ...] = ()  # image glob -> CUDA
    tagged: tuple[tuple[frozenset[str], tuple[Version, ...], str], ...] = ()
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
                tuple(v for v in (parse_version(f) for f in row.get("forward") or ()) if v),
                str(row.get("source", "")),
            )
            for row in table.get("tagged") or ()
        )
        # A private image is most often built FROM an official CUDA image and keeps its
        # forward-compatibility clauses: the same branches count (none known: None).
        inherited = tagged[0][1] if tagged else None
        compiled_rules = tuple(
            (
                str(r["image"]),
                ImageCUDA(
                    parse_version(str(r["cuda"])) or (0,),
                    inherited,
                    f"rule file cudaImages {r['image']}",
                ),
            )
            for r in rules
        )
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
        return cls(compiled_rules, tagged, releases)

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
                    return ImageCUDA(version, forward, f"{image}: {source}")
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
