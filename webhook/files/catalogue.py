"""The shipped instance-type catalogue (``webhook/data/instance-types.json``), read once.

The engine may not read files: this shell hands it the rows as plain data, and
``compile_policy`` extends them with ``InstanceType`` rule documents.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from webhook.engine.resources.instancetypes import Catalogue

DATA_FILE = "instance-types.json"


@functools.cache
def shipped_catalogue() -> Catalogue:
    """The catalogue the package ships; a broken file is a packaging bug, said plainly."""
    text = resources.files("webhook").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    return Catalogue.from_data(json.loads(text), where=f"webhook/data/{DATA_FILE}")
