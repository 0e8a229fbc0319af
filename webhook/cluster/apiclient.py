"""Just enough of a Kubernetes API client for list and watch, on raw JSON.

The kubernetes package only loads configuration here: its generated models cost about
0.28 ms per node to build against 0.045 ms for ``json.loads``, and its watch helper hides
the bookmarks, the ``410 Gone`` and the resource versions a cache must handle itself.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

import orjson
import urllib3
import yaml

from webhook import __version__

USER_AGENT = f"gpu-webhook/{__version__}"
IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"
JSON_PATCH = "application/json-patch+json"
T = TypeVar("T")


class KubeconfigError(Exception):
    """The kubeconfig (or the in-cluster service account) cannot be used."""


class ApiError(Exception):
    """The API server answered with an error, or could not be reached (``code`` 0)."""

    def __init__(self, message: str, *, code: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason

    @classmethod
    def from_status(cls, status: Mapping[str, Any], *, code: int) -> ApiError:
        message = str(status.get("message") or f"HTTP {code}")
        reason = str(status.get("reason") or "")
        code = int(status.get("code") or code)
        kind = Expired if code == 410 else cls
        return kind(f"{code} {reason}: {message}" if reason else message, code=code, reason=reason)


class Expired(ApiError):
    """``410 Gone``: the resource version is too old (or a list's continue token expired)."""


@dataclass(frozen=True, slots=True)
class ApiEndpoint:
    """Where the API server is and how to authenticate to it."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    # Called per request, so that rotated service-account tokens and exec plugins' tokens
    # are picked up: returns the whole header value ("Bearer ...") or None.
    authorization: Callable[[], str | None] | None = None


def api_endpoint_from_kubeconfig(path: str | None, *, context: str | None = None) -> ApiEndpoint:
    """The endpoint of ``path`` (and ``context``, else its current context); without a
    path, the pod's service account when running in a cluster, else the default
    kubeconfig (``$KUBECONFIG``, ``~/.kube/config``)."""
    from kubernetes import config as kube_config
    from kubernetes.client import Configuration

    configuration = Configuration()
    try:
        if path is None and context is None and os.environ.get(IN_CLUSTER_HOST_ENV):
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration, try_refresh_token=True
            )
        else:
            check_kubeconfig(path, context=context)
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except KubeconfigError:
        raise
    except (kube_config.ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        raise KubeconfigError(f"{path or 'kubeconfig'}: {one_line(exc)}") from None
    except Exception as exc:  # the loader raises yaml and other errors for a broken file
        raise KubeconfigError(f"{path or 'kubeconfig'}: cannot be read: {one_line(exc)}") from None

    def authorization() -> str | None:
        value: str | None = configuration.get_api_key_with_prefix(
            "BearerToken", alias="authorization"
        )
        return value

    return ApiEndpoint(
        host=str(configuration.host).rstrip("/"),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        tls_server_name=configuration.tls_server_name,
        authorization=authorization,
    )


def kubeconfig_files(path: str | None) -> list[str]:
    """The files a kubeconfig is read from, as kubectl finds them: ``path``, else each of
    ``$KUBECONFIG`` (a list, merged), else ``~/.kube/config``."""
    if path is not None:
        return [path]
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [os.path.expanduser("~/.kube/config")]


def check_kubeconfig(path: str | None, *, context: str | None = None) -> None:
    """Raise ``KubeconfigError`` with one line when a kubeconfig file is missing, is not
    YAML, is not a kubeconfig, or lacks ``context``: the kubernetes loader would raise
    yaml's multi-line errors or a ``TypeError`` from deep inside."""
    contexts: list[str] = []
    files = kubeconfig_files(path)
    for name in files:
        if not os.path.isfile(name):
            if path is not None or len(files) == 1:
                raise KubeconfigError(f"{name}: no such file")
            continue  # kubectl skips a missing file of a $KUBECONFIG list
        try:
            with open(name, "rb") as handle:
                loaded = yaml.safe_load(handle)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or exc
            raise KubeconfigError(f"{name}: not YAML{where}: {one_line(problem)}") from None
        except OSError as exc:
            raise KubeconfigError(f"{name}: cannot be read: {exc.strerror or exc}") from None
        if loaded is None:
            continue
        if not isinstance(loaded, Mapping):
            raise KubeconfigError(
                f"{name}: not a kubeconfig (a YAML mapping with clusters, users and contexts; "
                f"this is a {type(loaded).__name__})"
            )
        for entry in loaded.get("contexts") or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                contexts.append(entry["name"])
    if context is not None and context not in contexts:
        known = ", ".join(contexts) or "none"
        raise KubeconfigError(f"{', '.join(files)}: no context {context!r} (contexts: {known})")


def one_line(value: object) -> str:
    """A message of several lines (yaml's, urllib3's) as one."""
    return " ".join(str(value).split())


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: its items as raw JSON, and where the list stands."""

    items: list[dict[str, Any]]
    resource_version: str
    # What the server says is left after this page (an estimate; absent on some lists).
    remaining: int | None = None


CONNECT_TIMEOUT_SECONDS = 10.0


class ApiClient:
    """Paginated lists and streamed watches of one API server, answering raw JSON."""

    def __init__(
        self,
        endpoint: ApiEndpoint,
        *,
        request_timeout_seconds: float = 30.0,
    ) -> None:
        self.endpoint = endpoint
        self.request_timeout_seconds = request_timeout_seconds
        try:
            self._pool = _pool_for(endpoint)
        except (ssl.SSLError, OSError) as exc:
            raise KubeconfigError(
                f"the TLS settings for {endpoint.host} are unusable: {exc}"
            ) from None
        self._lock = threading.Lock()
        self._open: set[urllib3.BaseHTTPResponse] = set()
        self._closing = False

    def list(
        self, path: str, *, parse: Callable[[Mapping[str, Any]], T], limit: int = 500
    ) -> tuple[list[T], str]:
        """Every item of a collection, parsed page by page (so that only one page of raw
        JSON is held at a time), and the list's resource version."""
        items: list[T] = []
        resource_version = ""
        for page in self.pages(path, limit=limit):
            items.extend(parse(i) for i in page.items)
            resource_version = page.resource_version
        return items, resource_version

    def pages(
        self, path: str, *, limit: int = 500, query: Mapping[str, str] | None = None
    ) -> Iterator[Page]:
        """A collection one page at a time (``limit`` and ``continue``): a caller that
        keeps only what it needs of each page lists 100,000 objects in bounded memory."""
        token = ""
        while True:
            params: dict[str, str | int] = {**(query or {}), "limit": limit}
            if token:
                params["continue"] = token
            body = self._get_json(path, params)
            items = body.get("items")
            if not isinstance(items, list):
                raise ApiError(f"GET {path}: the answer holds no items list")
            meta = body.get("metadata") or {}
            token = str(meta.get("continue") or "")
            yield Page(
                items=[i for i in items if isinstance(i, dict)],
                resource_version=str(meta.get("resourceVersion") or ""),
                remaining=_int(meta.get("remainingItemCount")),
            )
            if not token:
                return

    def get(
        self,
        path: str,
        query: Mapping[str, str | int] | None = None,
        *,
        timeout_seconds: float | None = None,
    ) -> Mapping[str, Any]:
        """One object (or any JSON answer) by path; ``ApiError`` with the status code.
        ``timeout_seconds`` bounds the connect and the read alike (a review's budget)."""
        if timeout_seconds is None:
            return self._get_json(path, query or {})
        return self._json(path, query or {}, timeout=timeout_seconds)

    def send(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> Mapping[str, Any]:
        """A write (POST, PUT, DELETE) with a JSON body; the answer as JSON. A 409 raises
        ``ApiError`` with ``code`` 409, for the caller's read-and-retry."""
        data = orjson.dumps(body) if body is not None else None
        return self._json(path, {}, method=method, body=data)

    def patch(self, path: str, ops: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        """A JSON Patch (RFC 6902): its ``test`` operations make it a precondition."""
        return self._json(
            path, {}, method="PATCH", body=orjson.dumps(list(ops)), content_type=JSON_PATCH
        )

    def serves(self, path: str) -> bool:
        """Whether the API server serves ``path`` (an API group version's discovery
        document): False on 404, ``ApiError`` when it cannot tell."""
        try:
            self._get_json(path, {})
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int
    ) -> Iterator[Mapping[str, Any]]:
        """Watch events from ``resource_version`` on, with bookmarks, until the server ends
        the watch (after ``timeout_seconds``) or ``close`` is called.

        Raises ``Expired`` for an ``ERROR`` event with code 410 and ``ApiError`` for others
        and for transport failures, so that callers handle all errors in one place.
        """
        query: dict[str, str | int] = {
            "watch": 1,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        # The request is made now, not on first iteration: an error surfaces here and a
        # caller knows the watch was accepted when this returns.
        response = self._request(path, query, read_timeout=timeout_seconds + 30.0)
        return self._events(path, response)

    def _events(self, path: str, response: urllib3.BaseHTTPResponse) -> Iterator[Mapping[str, Any]]:
        try:
            for line in _lines(response):
                if not line.strip():
                    continue
                event = _json_object(line, f"watch {path}: not a JSON event: {line[:80]!r}")
                if event.get("type") == "ERROR":
                    status = event.get("object")
                    raise ApiError.from_status(
                        status if isinstance(status, Mapping) else {}, code=500
                    )
                yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self._closed(response):
                return
            raise ApiError(f"watch {path}: connection lost: {_describe(exc)}") from None
        finally:
            self._forget(response)

    def close(self) -> None:
        """End the requests in progress (from any thread) and any later one: for good."""
        with self._lock:
            self._closing = True
            open_now = list(self._open)
            self._open.clear()
        for response in open_now:
            # Its reader may have released it to the pool meanwhile: nothing left to end
            # (urllib3 then raises RuntimeError, or ValueError before the socket is known),
            # or closed its socket (OSError EBADF: the pool discards a connection it has no
            # room for).
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                response.shutdown()
            response.release_conn()
        self._pool.clear()

    def _get_json(self, path: str, query: Mapping[str, str | int]) -> Mapping[str, Any]:
        return self._json(path, query)

    def _json(
        self,
        path: str,
        query: Mapping[str, str | int],
        *,
        method: str = "GET",
        body: bytes | None = None,
        timeout: float | None = None,
        content_type: str = "application/json",
    ) -> Mapping[str, Any]:
        response = self._request(
            path,
            query,
            read_timeout=self.request_timeout_seconds if timeout is None else timeout,
            method=method,
            body=body,
            content_type=content_type,
            connect_timeout=CONNECT_TIMEOUT_SECONDS if timeout is None else timeout,
        )
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"{method} {path}: connection lost: {_describe(exc)}") from None
        finally:
            self._forget(response)
        return _json_object(data or b"{}", f"{method} {path}: the answer is not a JSON object")

    def _request(
        self,
        path: str,
        query: Mapping[str, str | int],
        *,
        read_timeout: float,
        method: str = "GET",
        body: bytes | None = None,
        connect_timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> urllib3.BaseHTTPResponse:
        url = f"{self.endpoint.host}{path}"
        if query:
            url += f"?{urlencode(query)}"
        headers = {
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
            "User-Agent": USER_AGENT,
        }
        if body is not None:
            headers["Content-Type"] = content_type
        if self.endpoint.authorization is not None:
            try:
                value = self.endpoint.authorization()
            except Exception as exc:  # a token file that vanished, an exec plugin failing
                raise ApiError(f"cannot get credentials: {exc}") from None
            if value:
                headers["Authorization"] = value
        try:
            response = self._pool.request(
                method,
                url,
                body=body,
                headers=headers,
                preload_content=False,
                retries=False,
                timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"{method} {path}: {_describe(exc)}") from None
        with self._lock:
            closing = self._closing
            if not closing:
                self._open.add(response)
        if closing:
            # ``close`` ran while this request was on its way: do not start reading.
            response.shutdown()
            response.release_conn()
            raise ApiError(f"{method} {path}: the client is closed")
        if response.status not in (200, 201, 202):
            try:
                raw = response.data
            # The body of an error answer is best effort: a ``close`` from another thread
            # breaks the read in more ways than urllib3 wraps (IncompleteRead, and an
            # AttributeError inside urllib3 once the connection is gone).
            except Exception:
                raw = b""
            finally:
                self._forget(response)
            raise ApiError.from_status(_status_of(raw), code=response.status)
        return response

    def _forget(self, response: urllib3.BaseHTTPResponse) -> None:
        with self._lock:
            self._open.discard(response)
        response.release_conn()

    def _closed(self, response: urllib3.BaseHTTPResponse) -> bool:
        with self._lock:
            return response not in self._open


def _pool_for(endpoint: ApiEndpoint) -> urllib3.PoolManager:
    if not endpoint.host.startswith("https://"):
        return urllib3.PoolManager(maxsize=4)
    context = ssl.create_default_context(cafile=endpoint.ca_file)
    if not endpoint.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if endpoint.cert_file:
        context.load_cert_chain(endpoint.cert_file, endpoint.key_file)
    return urllib3.PoolManager(
        maxsize=4,
        ssl_context=context,
        server_hostname=endpoint.tls_server_name,
        assert_hostname=False if not endpoint.verify else None,
    )


def _lines(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """Lines as they arrive: the API server sends one event per chunk, often split."""
    pending = b""
    for chunk in response.stream(64 * 1024, decode_content=True):
        pending += chunk
        while True:
            end = pending.find(b"\n")
            if end < 0:
                break
            yield pending[:end]
            pending = pending[end + 1 :]
    if pending.strip():
        yield pending


def _json_object(data: bytes, error: str) -> Mapping[str, Any]:
    try:
        value = orjson.loads(data)
    except ValueError:
        raise ApiError(error) from None
    if not isinstance(value, Mapping):
        raise ApiError(error)
    return value


def _status_of(raw: bytes) -> Mapping[str, Any]:
    try:
        body = orjson.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, Mapping) and body.get("kind") == "Status":
        return body
    text = raw[:200].decode("utf-8", "replace").strip()
    return {"message": text} if text else {}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return one_line(reason or exc) or type(exc).__name__
