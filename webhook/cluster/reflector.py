"""List, then watch from the list's resource version, for as long as it runs.

The loop that Kubernetes informers run (client-go's ``Reflector``): a ``410 Gone`` means
the watch can no longer resume, so the collection is listed again; a dropped connection or
an API error is retried with capped, jittered backoff so that a fleet of webhook pods does
not hammer an API server that is already in trouble.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from webhook.cluster.apiclient import ApiClient, ApiError, Expired
from webhook.cluster.watchmetrics import SourceMetrics

log = logging.getLogger("webhook.inventory")
T = TypeVar("T")


class Handler(Protocol[T]):
    """What a reflector feeds. Called from the reflector's thread only."""

    def parse(self, obj: Mapping[str, Any]) -> T:
        """Keep what the cache needs of one object, as soon as it is read."""
        ...

    def replace(self, items: list[T], resource_version: str) -> None: ...

    def apply(self, kind: str, item: T, resource_version: str) -> None: ...

    def progress(self, resource_version: str) -> None: ...

    def failed(self, error: ApiError) -> None: ...


@dataclass(slots=True)
class Backoff:
    """Exponential delays with full jitter, capped; ``reset`` after a success."""

    initial_seconds: float = 0.5
    cap_seconds: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    _attempt: int = 0

    def next(self) -> float:
        ceiling = min(self.cap_seconds, self.initial_seconds * (2**self._attempt))
        self._attempt = min(self._attempt + 1, 30)
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0


class Reflector(Generic[T]):
    """Keeps a ``Handler`` in step with one collection (``/api/v1/nodes``, ...)."""

    def __init__(
        self,
        *,
        client: ApiClient,
        path: str,
        handler: Handler[T],
        backoff: Backoff | None = None,
        page_size: int = 500,
        watch_timeout_seconds: Callable[[], int] | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.handler = handler
        self.backoff = backoff or Backoff()
        self.page_size = page_size
        # client-go picks 5 to 10 minutes at random so that watches do not end together.
        self.watch_timeout_seconds = watch_timeout_seconds or (lambda: random.randint(300, 600))
        self.resource_version = ""
        self.lists = 0
        self.relists = 0
        self._expired_before_events = False
        self.metrics = SourceMetrics(path)

    def run(self, stop: threading.Event) -> None:
        self.metrics.running(True)
        try:
            self._run(stop)
        finally:
            self.metrics.running(False)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if not self.resource_version:
                    self._list()
                self._watch(stop)
            except Expired as exc:
                # The watch cannot resume from where it was: start again from a list. A
                # list whose watch expires at once is retried with backoff, not in a loop.
                log.info(
                    "%s: watch expired, listing again",
                    self.path,
                    extra={
                        "path": self.path,
                        "resource_version": self.resource_version,
                        "error": str(exc),
                    },
                )
                self.resource_version = ""
                if stop.wait(self.backoff.next() if self._expired_before_events else 0):
                    return
                self._expired_before_events = True
            except Exception as raised:  # a bug must not freeze the cache: start over
                if stop.is_set():
                    return  # the error is the stop itself: closing the connections
                error = raised if isinstance(raised, ApiError) else self._unexpected(raised)
                delay = self.backoff.next()
                log.warning(
                    "%s: API request failed, retrying in %.1f s: %s",
                    self.path,
                    delay,
                    error,
                    extra={
                        "path": self.path,
                        "error": str(error),
                        "code": error.code,
                        "retry_in_seconds": round(delay, 3),
                    },
                )
                self.handler.failed(error)
                self.metrics.failed()
                if stop.wait(delay):
                    return

    def _unexpected(self, raised: Exception) -> ApiError:
        log.exception("%s: unexpected error, listing again", self.path)
        self.resource_version = ""
        return ApiError(f"unexpected error: {raised!r}")

    def _list(self) -> None:
        started = time.monotonic()
        parsed, resource_version = self.client.list(
            self.path, parse=self._parse, limit=self.page_size
        )
        items = [item for item in parsed if item is not None]
        if self.lists:
            self.relists += 1
        self.lists += 1
        self.handler.replace(items, resource_version)
        self.metrics.synced()
        log.info(
            "%s: listed %d items at resource version %s",
            self.path,
            len(items),
            resource_version,
            extra={
                "path": self.path,
                "items": len(items),
                "resource_version": resource_version,
                "duration_seconds": round(time.monotonic() - started, 3),
            },
        )
        self.resource_version = resource_version

    def _parse(self, obj: Mapping[str, Any]) -> T | None:
        """One object the handler cannot read is skipped and logged, not fatal."""
        try:
            return self.handler.parse(obj)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            log.warning(
                "%s: skipped an object that cannot be read (%s): %r",
                self.path,
                name,
                exc,
                extra={"path": self.path, "object_name": name, "error": repr(exc)},
            )
            return None

    def _watch(self, stop: threading.Event) -> None:
        """Apply events until the watch ends; remember where to resume from."""
        events = self.client.watch(
            self.path,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_seconds(),
        )
        self.handler.progress(self.resource_version)
        self.metrics.synced()
        for event in events:
            if stop.is_set():
                break
            kind = str(event.get("type", ""))
            obj = event.get("object")
            if not isinstance(obj, Mapping):
                continue
            meta = obj.get("metadata") or {}
            resource_version = str(meta.get("resourceVersion") or self.resource_version)
            if kind == "BOOKMARK":
                self.handler.progress(resource_version)
            elif kind in ("ADDED", "MODIFIED", "DELETED"):
                item = self._parse(obj)
                if item is not None:
                    self.handler.apply(kind, item, resource_version)
            self.resource_version = resource_version
            self.metrics.synced()
            self.backoff.reset()
            self._expired_before_events = False
            # During a burst this thread would otherwise hold the lock for a whole switch
            # interval at a time.
            let_requests_run()


def let_requests_run() -> None:
    """Hand the interpreter lock to a waiting request thread, if there is one: what every
    background thread of the inventory calls between pieces of work."""
    time.sleep(0)
