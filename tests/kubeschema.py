"""Kubernetes' own OpenAPI schemas (kubernetes-validate), for tests that prove a patched
object stays as valid as it was."""

from __future__ import annotations

import functools
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils

K8S_VERSION = kubernetes_validate.latest_version()

# kubernetes-validate reads and parses its schema files at every ``validate`` (utils.py,
# ``validate`` calls ``schema_contents`` for the kind's file and the 1.8 MB
# ``_definitions.json``): 7 of the 8 ms a call takes, a few thousand calls in the suite.
# The files are part of the installed package and never change while it runs, and a
# schema is only read, so each is parsed once per test process.
kubernetes_validate.utils.schema_contents = functools.cache(  # type: ignore[assignment]
    kubernetes_validate.utils.schema_contents
)


def validation_error(obj: Any) -> str | None:
    """``None`` when valid; the first error otherwise. Raises for kinds without a schema."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=False)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(map(str, exc.path))}: {exc.message}"
    return None
