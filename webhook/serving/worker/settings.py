"""gunicorn's settings as a worker reads them."""

from __future__ import annotations

from typing import Any


class SettledConfig:
    """gunicorn's ``Config`` as a worker reads it: each setting looked up once. Every
    request read it again and again through ``Config.__getattr__`` (the parser's limits,
    ``is_ssl``, the keep-alive), about 5% of a worker's time under load; a worker's
    settings never change, since a reload (SIGHUP) starts new workers with a new config."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cfg, name)
        setattr(self, name, value)  # found in the instance from now on
        return value


def hooked(cfg: Any) -> bool:
    """Whether ``pre_request`` or ``post_request`` hooks are set: they take gunicorn's
    request object, so every request then goes through gunicorn's parser."""
    settings = getattr(cfg, "settings", {})
    for name in ("pre_request", "post_request"):
        setting = settings.get(name)
        if setting is not None and setting.value is not type(setting).default:
            return True
    return False
