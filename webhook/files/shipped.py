"""The tables the package ships in ``webhook/data``, each read once: the instance-type
catalogue, the CUDA versions of public images, and the schemas of Kubernetes' built-in
kinds.

The engine may not read files: this shell reads the package data and hands it over as
plain data (``compile_policy`` extends the first two with rule documents; ``check``,
``audit -f`` and ``explain -f`` decode manifests with the third).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml

from webhook.engine.kube.strict import KubeSchema
from webhook.engine.resources.instancetypes import Catalogue

CATALOGUE = "instance-types.json"
CUDA_TABLE = "cuda-images.yaml"
# Made by scripts/gen-kubeschemas from kubernetes-validate's strict schemas.
KUBE_SCHEMAS = "kubeschemas.json"


# The package's data directory as installed from a wheel or a checkout. importlib.resources
# (which imports zipfile, tempfile and random) is asked only where it is not a directory, as
# in a zip: it was 4% of check's start-up (bench/startup.py).
DATA = Path(__file__).resolve().parent.parent / "data"


def _text(name: str) -> str:
    if (DATA / name).is_file():
        return (DATA / name).read_text(encoding="utf-8")
    from importlib import resources

    return resources.files("webhook").joinpath("data", name).read_text(encoding="utf-8")


@functools.cache
def shipped_catalogue() -> Catalogue:
    """The catalogue the package ships; a broken file is a packaging bug, said plainly."""
    return Catalogue.from_data(json.loads(_text(CATALOGUE)), where=f"webhook/data/{CATALOGUE}")


@functools.cache
def cuda_table() -> dict[str, Any]:
    """The table as plain data; a package without it (a broken install) gives an empty
    table, which only makes the cudaDriver check see fewer images."""
    try:
        raw = _text(CUDA_TABLE)
    except (FileNotFoundError, ModuleNotFoundError, OSError):
        return {}
    # libyaml's parser where PyYAML has it: the same safe constructors and resolvers, and
    # the pure-Python parser of this 7 KB table was the largest cost of ``check`` after
    # its imports (bench/startup.py).
    data = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return data if isinstance(data, dict) else {}


class UnknownVersion(ValueError):
    """A ``--kubernetes-version`` the shipped schemas do not cover."""


@functools.cache
def _kube_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(_text(KUBE_SCHEMAS))
    return document


def supported_versions() -> list[str]:
    """Every Kubernetes version the schemas cover, oldest first (``1.30``, ``1.31``, ...)."""
    return list(_kube_document()["versions"])


@functools.cache
def kube_schema(version: str | None = None) -> KubeSchema:
    """One version's schema (default the newest); ``v1.36``, ``1.36`` and ``1.36.2`` all
    name 1.36."""
    known = supported_versions()
    wanted = _minor(version) if version else known[-1]
    table = _kube_document()["versions"].get(wanted)
    if table is None:
        raise UnknownVersion(
            f"no schemas for Kubernetes {version}: this gpu-webhook knows {known[0]} to "
            f"{known[-1]}; give --kubernetes-version one of those"
        )
    schemas = _kube_document()["schemas"]
    definitions = {name: schemas[key] for name, key in table["definitions"].items()}
    return KubeSchema(version=wanted, kinds=table["kinds"], definitions=definitions)


def _minor(version: str) -> str:
    parts = version.strip().removeprefix("v").split(".")
    return ".".join(parts[:2])
