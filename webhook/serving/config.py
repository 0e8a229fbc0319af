"""Settings from flags and the environment: the one reader of ``os.environ``.

Every ``gpu-webhook serve`` flag has an environment variable, so a Deployment can set
either. Flags win over the environment, which wins over the defaults here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LOG_LEVELS = ("debug", "info", "warning", "error")
FailureMode = Literal["allow", "deny"]

# flag name -> environment variable
ENVIRONMENT = {
    "port": "GPU_WEBHOOK_PORT",
    "health_port": "GPU_WEBHOOK_HEALTH_PORT",
    "host": "GPU_WEBHOOK_HOST",
    "cert_dir": "GPU_WEBHOOK_CERT_DIR",
    "rules": "GPU_WEBHOOK_RULES",
    "inventory": "GPU_WEBHOOK_INVENTORY",
    "kubeconfig": "GPU_WEBHOOK_KUBECONFIG",
    "context": "GPU_WEBHOOK_CONTEXT",
    "workers": "GPU_WEBHOOK_WORKERS",
    "log_level": "GPU_WEBHOOK_LOG_LEVEL",
    "inventory_failure_mode": "GPU_WEBHOOK_INVENTORY_FAILURE_MODE",
    "audit": "GPU_WEBHOOK_AUDIT",
    "audit_period": "GPU_WEBHOOK_AUDIT_PERIOD",
    "audit_lease_namespace": "GPU_WEBHOOK_AUDIT_LEASE_NAMESPACE",
    "sync_match_conditions": "GPU_WEBHOOK_SYNC_MATCH_CONDITIONS",
    "webhook_configuration": "GPU_WEBHOOK_WEBHOOK_CONFIGURATION",
}
DEFAULTS: dict[str, str] = {
    "port": "8443",
    "health_port": "8080",
    "host": "0.0.0.0",
    "cert_dir": "/etc/gpu-webhook/tls",
    "rules": "rules",
    "workers": "2",
    "log_level": "info",
    "audit_period": "3600",
    "webhook_configuration": "gpu-webhook",
}


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message names the flag and variable."""


@dataclass(frozen=True, slots=True)
class Settings:
    port: int = 8443
    health_port: int = 8080  # 0: no plain-HTTP health and metrics port
    host: str = "0.0.0.0"  # the API server calls the pod IP
    cert_dir: Path = Path("/etc/gpu-webhook/tls")
    rules: Path = Path("rules")
    inventory: Path | None = None
    kubeconfig: Path | None = None
    context: str | None = None  # of the kubeconfig; None: its current-context
    in_cluster: bool = False
    workers: int = 2
    threads: int = 4
    log_level: str = "info"
    inventory_failure_mode: FailureMode | None = None
    # The socket of the pod's inventory watcher: set by the gunicorn master for its workers
    # when it runs one (a live inventory), never by a flag.
    inventory_feed: Path | None = None
    # Seconds between checks of the rule files (and certificate files) for changes.
    reload_interval: float = 2.0
    # Where the server keeps the last good rules and inventory file for workers that start
    # while the files on disk are broken (``webhook.files.lastgood``); set by ``serve``.
    last_good: Path | None = None
    # The background audit (one replica, by Lease): off unless asked for.
    audit: bool = False
    audit_period: float = 3600.0
    audit_lease_namespace: str | None = None  # None: the pod's own namespace
    # The webhooks' matchConditions kept in sync at runtime (one replica, by Lease, in the
    # inventory watcher): off unless asked for (docs/deploy.md, "Match conditions").
    sync_match_conditions: bool = False
    webhook_configuration: str = "gpu-webhook"  # the two configurations' name

    @property
    def cert_file(self) -> Path:
        return self.cert_dir / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.cert_dir / "tls.key"

    @property
    def live_inventory(self) -> bool:
        return self.kubeconfig is not None or self.in_cluster


def env_default(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The default shown and used for flag ``name``: its variable, else the built-in."""
    env = os.environ if environ is None else environ
    return env.get(ENVIRONMENT[name]) or DEFAULTS.get(name)


def in_cluster(environ: Mapping[str, str] | None = None) -> bool:
    """Whether we run in a pod with a service account (what in-cluster config reads)."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST"))


def multiprocess_dir(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return env.get(MULTIPROC_ENV) or None


def use_multiprocess_metrics(directory: str) -> None:
    """Point prometheus_client at ``directory``; must run before it is first imported."""
    os.environ[MULTIPROC_ENV] = directory


def port(value: str | None, flag: str) -> int:
    number = integer(value, flag)
    if not 0 <= number <= 65535:
        raise ConfigError(f"{flag} must be a port number, not {value!r}")
    return number


def integer(value: str | None, flag: str, *, minimum: int = 0) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise ConfigError(f"{flag} must be a whole number, not {value!r}") from None
    if number < minimum:
        raise ConfigError(f"{flag} must be at least {minimum}")
    return number


def switch(value: str | None, name: str) -> bool:
    """An on/off environment variable: true/false, 1/0, yes/no, on/off; unset is off."""
    text = (value or "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be true or false, not {value!r}")


def seconds(value: str | None, flag: str, *, minimum: float) -> float:
    try:
        number = float(str(value))
    except ValueError:
        raise ConfigError(f"{flag} must be a number of seconds, not {value!r}") from None
    if not number >= minimum:
        raise ConfigError(f"{flag} must be at least {minimum:g} seconds")
    return number


def failure_mode(value: str | None) -> FailureMode | None:
    if not value:
        return None
    if value == "allow":
        return "allow"
    if value == "deny":
        return "deny"
    raise ConfigError(f"{ENVIRONMENT['inventory_failure_mode']} must be allow or deny")


def log_level(value: str | None) -> str:
    level = (value or "info").lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}")
    return level


# An object name (RFC 1123 subdomain), as the API server validates metadata.name.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def name(value: str | None, flag: str) -> str:
    text = (value or "").strip()
    if len(text) > 253 or not _NAME.fullmatch(text):
        raise ConfigError(
            f"{flag} must be an object name (lower-case letters, digits, '-' and '.'), "
            f"not {value!r}"
        )
    return text
