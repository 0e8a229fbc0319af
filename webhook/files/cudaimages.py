"""The shipped table of public CUDA images (``webhook/data/cuda-images.yaml``), read once.

The engine may not read files: this shell reads the package data and hands it to
``compile_policy`` as plain data.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

TABLE = "cuda-images.yaml"


@cache
def cuda_table() -> dict[str, Any]:
    """The table as plain data; a package without it (a broken install) gives an empty
    table, which only makes the cudaDriver check see fewer images."""
    try:
        raw = resources.files("webhook").joinpath("data", TABLE).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError, OSError):
        return {}
    data = yaml.safe_load(raw)
    return data if isinstance(data, dict) else {}
