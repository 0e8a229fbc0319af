"""``certs install``: the serving pair into its TLS Secret, the CA into both ``caBundle``s.

Safe to run any number of times, from a laptop or from a CronJob: it writes only what is
missing or due for renewal, and every write carries the ``resourceVersion`` it read, so two
runs racing each other cannot both win. When one loses (409) it reads again and re-decides.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from webhook.cluster.apiclient import KubeconfigError, check_kubeconfig, one_line
from webhook.files import certs

ATTEMPTS = 3
_LABELS = {"app.kubernetes.io/name": "gpu-webhook"}
_T = TypeVar("_T")
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class InstallError(Exception):
    """The cluster refused or lacks something; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Target:
    namespace: str
    service: str
    secret: str
    webhook_config: str
    extra_sans: tuple[str, ...] = ()
    days: int = certs.DEFAULT_DAYS
    renew_within: dt.timedelta = dt.timedelta(days=30)

    @property
    def names(self) -> tuple[str, ...]:
        return (*certs.service_names(self.service, self.namespace), *self.extra_sans)


def connect(
    *, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False
) -> client.ApiClient:
    configuration = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            check_kubeconfig(kubeconfig, context=context)
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except KubeconfigError as err:
        where, _, problem = str(err).partition(": ")
        raise InstallError(f"{where}: cannot load cluster credentials ({problem})") from None
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as err:
        where = "in-cluster service account" if in_cluster else kubeconfig or "kubeconfig"
        raise InstallError(f"{where}: cannot load cluster credentials ({one_line(err)})") from None
    # One attempt per request: urllib3's retries would make an unreachable server a wait
    # of several connects and an error naming only the last.
    configuration.retries = False
    return client.ApiClient(configuration)


def install(api: client.ApiClient, target: Target, *, now: dt.datetime | None = None) -> list[str]:
    """Make the Secret and both configurations current; say what was done, one line each."""
    when = now or dt.datetime.now(dt.UTC)
    try:
        actions, pair = _with_retries(lambda: _ensure_secret(api, target, when))
        for kind in KINDS:
            actions += _with_retries(partial(_ensure_bundle, api, target, kind, pair, when))
    except (urllib3.exceptions.HTTPError, OSError) as err:
        host = api.configuration.host
        raise InstallError(f"cannot reach the API server at {host}: {_reason(err)}") from None
    return actions


def _reason(err: BaseException) -> str:
    """The cause urllib3 wraps (refused, TLS verification), without its pool's repr."""
    reason = getattr(err, "reason", None)
    inner = reason if isinstance(reason, BaseException) else err
    if isinstance(inner, urllib3.exceptions.NewConnectionError):
        return one_line(str(inner).rsplit(": ", 1)[-1])
    return one_line(inner)


def _with_retries(step: Callable[[], _T]) -> _T:
    for attempt in range(ATTEMPTS):
        try:
            return step()
        except ApiException as err:
            if err.status != 409 or attempt == ATTEMPTS - 1:
                raise InstallError(_explain(err)) from None
    raise AssertionError("unreachable")


def _ensure_secret(
    api: client.ApiClient, target: Target, now: dt.datetime
) -> tuple[list[str], certs.ServingPair]:
    core = client.CoreV1Api(api)
    where = f"Secret {target.namespace}/{target.secret}"
    current = _read(api, lambda: core.read_namespaced_secret(target.secret, target.namespace))
    pair = _pair(current)
    reason = "stored pair unreadable"
    if pair is not None:
        report = certs.inspect(pair, required=target.names, now=now)
        if not report.problems and not certs.expires_within(pair, target.renew_within, now):
            return [f"{where}: certificate valid until {report.not_after:%Y-%m-%d}, kept"], pair
        reason = "; ".join(report.problems) or f"expires {report.not_after:%Y-%m-%d}"
    fresh = certs.generate(
        service=target.service,
        namespace=target.namespace,
        extra_sans=target.extra_sans,
        days=target.days,
        now=now,
    )
    data: dict[str, bytes | str] = {
        "ca.crt": _b64(fresh.ca_crt),
        "tls.crt": _b64(fresh.tls_crt),
        "tls.key": _b64(fresh.tls_key),
    }
    if current is None:
        body = client.V1Secret(
            api_version="v1",
            kind="Secret",
            metadata=client.V1ObjectMeta(name=target.secret, labels=_LABELS),
            type="kubernetes.io/tls",
            data=data,
        )
        core.create_namespaced_secret(target.namespace, body)
        return [f"{where}: created"], fresh
    version = current["metadata"].get("resourceVersion")
    patch = {"metadata": {"resourceVersion": version}, "data": data}
    core.patch_namespaced_secret(
        target.secret, target.namespace, patch, _content_type="application/merge-patch+json"
    )
    return [f"{where}: renewed ({reason})"], fresh


def _ensure_bundle(
    api: client.ApiClient,
    target: Target,
    kind: str,
    pair: certs.ServingPair,
    now: dt.datetime,
) -> list[str]:
    adm = client.AdmissionregistrationV1Api(api)
    read, patch = {
        "MutatingWebhookConfiguration": (
            adm.read_mutating_webhook_configuration,
            adm.patch_mutating_webhook_configuration,
        ),
        "ValidatingWebhookConfiguration": (
            adm.read_validating_webhook_configuration,
            adm.patch_validating_webhook_configuration,
        ),
    }[kind]
    where = f"{kind} {target.webhook_config}"
    current = _read(api, lambda: read(target.webhook_config))
    if current is None:
        raise InstallError(
            f"{where} not found: apply the manifests first (kubectl apply -k deploy/base)"
        )
    # The API server refuses (409) a patch whose resourceVersion is not the stored one.
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": _version(current)}
    ]
    for index, hook in enumerate(current.get("webhooks") or []):
        old = base64.b64decode((hook.get("clientConfig") or {}).get("caBundle") or "")
        bundle = certs.ca_bundle(pair.ca_crt, old, now)
        if bundle != old:
            path = f"/webhooks/{index}/clientConfig/caBundle"
            ops.append({"op": "add", "path": path, "value": _b64(bundle)})
    if len(ops) == 1:
        return [f"{where}: caBundle current, kept"]
    patch(target.webhook_config, ops)
    return [f"{where}: caBundle set for {len(ops) - 1} webhook(s)"]


def _read(api: client.ApiClient, call: Callable[[], Any]) -> dict[str, Any] | None:
    try:
        result: dict[str, Any] = api.sanitize_for_serialization(call())  # type: ignore[no-untyped-call]
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return result


def _pair(secret: Mapping[str, Any] | None) -> certs.ServingPair | None:
    """The pair stored in the Secret, or None when it is absent or not all three PEMs."""
    data = (secret or {}).get("data") or {}
    try:
        pair = certs.ServingPair(
            ca_crt=base64.b64decode(data["ca.crt"]),
            tls_crt=base64.b64decode(data["tls.crt"]),
            tls_key=base64.b64decode(data["tls.key"]),
        )
        certs.inspect(pair)
    except (KeyError, ValueError, certs.CertError):
        return None
    return pair


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _explain(err: ApiException) -> str:
    if not err.status:  # the client's own wrapping of a TLS failure: nothing was answered
        return f"cannot reach the API server: {one_line(err.reason)}"
    hint = {
        401: "the credentials were refused; check the kubeconfig or the service account token",
        403: "not allowed; the installer needs the RBAC in docs/deploy.md",
        404: "not found; does the namespace exist? apply the manifests first",
        409: "the object kept changing under us; run again",
    }.get(err.status or 0, "")
    return f"API server answered {err.status} {err.reason}: {_message(err)}" + (
        f" ({hint})" if hint else ""
    )


def _message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body or "{}").get("message", "")).strip()
    except ValueError:
        return str(err.body or "").strip()
