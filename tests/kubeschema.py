"""Kubernetes' own OpenAPI schemas (kubernetes-validate), for tests that prove a patched
object stays as valid as it was."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

K8S_VERSION = kubernetes_validate.latest_version()


def validation_error(obj: Any) -> str | None:
    """``None`` when valid; the first error otherwise. Raises for kinds without a schema."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=False)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(map(str, exc.path))}: {exc.message}"
    return None
