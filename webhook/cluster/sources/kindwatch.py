"""What the watches of kinds a cluster may or may not serve share (DRA, autoscaler and
rule objects): discovery asked again with backoff until it answers, a probe that tells a
collection served but forbidden (403) from one a reflector can read, and one reflector
per collection, all with the same settings, in threads ending with ``stop``.

A kind that is not served (404 on its group version) or not readable (403) is no error:
each watch says what that means for its kind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypedDict, TypeVar

from webhook.cluster.apiclient import ApiClient, ApiError
from webhook.cluster.reflector import Backoff, Handler, Reflector

T = TypeVar("T")


class ReflectorSettings(TypedDict, total=False):
    """How a watch's reflectors retry, page and time out (``KindWatch``'s defaults)."""

    backoff: Callable[[], Backoff]
    page_size: int
    watch_timeout_seconds: Callable[[], int] | None


def served_resources(client: ApiClient, group_version_path: str) -> frozenset[str]:
    """The resources a group version's discovery document names; none where the group
    version is not served (404)."""
    try:
        document = client.get(group_version_path)
    except ApiError as exc:
        if exc.code == 404:
            return frozenset()
        raise
    resources = document.get("resources") or []
    return frozenset(str(r.get("name")) for r in resources if isinstance(r, Mapping))


def list_readable(
    client: ApiClient, path: str, *, parse: Callable[[Mapping[str, Any]], T]
) -> list[T] | None:
    """One list of a collection, for tools; None where it is served but may not be read
    (403)."""
    try:
        items, _ = client.list(path, parse=parse)
    except ApiError as exc:
        if exc.code != 403:
            raise
        return None
    return items


class KindWatch:
    """The client and reflector settings of a watch, and the steps its loop is made of."""

    log = logging.getLogger("webhook.inventory")

    def __init__(
        self,
        *,
        client: ApiClient,
        backoff: Callable[[], Backoff] = Backoff,
        page_size: int = 500,
        watch_timeout_seconds: Callable[[], int] | None = None,
    ) -> None:
        self._client = client
        self._backoff = backoff
        self._page_size = page_size
        self._watch_timeout_seconds = watch_timeout_seconds

    def discover(self, stop: threading.Event, ask: Callable[[], T], *, what: str) -> T | None:
        """``ask``'s answer, asked again with backoff while the API fails; None once
        stopped."""
        backoff = self._backoff()
        while not stop.is_set():
            try:
                return ask()
            except ApiError as exc:
                delay = backoff.next()
                self.log.warning("%s discovery failed, retrying in %.1f s: %s", what, delay, exc)
                if stop.wait(delay):
                    return None
        return None

    def readable(self, path: str) -> bool:
        """False where listing is forbidden (403); other errors the reflector retries."""
        try:
            self._client.get(path, {"limit": 1})
        except ApiError as exc:
            if exc.code == 403:
                return False
        return True

    def reflector(self, path: str, handler: Handler[T]) -> Reflector[T]:
        """A list-and-watch loop of one collection, with its own backoff."""
        return Reflector(
            client=self._client,
            path=path,
            handler=handler,
            backoff=self._backoff(),
            page_size=self._page_size,
            watch_timeout_seconds=self._watch_timeout_seconds,
        )

    def reflector_thread(
        self, path: str, handler: Handler[T], *, name: str, stop: threading.Event
    ) -> threading.Thread:
        """``reflector``'s loop, in a thread not yet started."""
        reflector = self.reflector(path, handler)
        return threading.Thread(target=reflector.run, args=(stop,), name=name, daemon=True)
