"""One holder among the replicas: a ``coordination.k8s.io/v1`` Lease, as client-go's
leader election (``tools/leaderelection/resourcelock/leaselock.go``) keeps one.

The holder renews ``spec.renewTime`` well within ``leaseDurationSeconds``; another replica
takes the Lease only once it has not been renewed for that long. Every write carries the
``resourceVersion`` it read, so two replicas racing for an expired Lease cannot both win:
the API server answers the loser 409 Conflict.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from webhook.cluster.apiclient import ApiClient, ApiError

log = logging.getLogger("webhook.audit")
Clock = Callable[[], dt.datetime]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def micro_time(when: dt.datetime) -> str:
    """``metav1.MicroTime`` as the API server writes it: RFC 3339 with microseconds."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class Lease:
    """``try_hold()`` takes or renews the Lease for ``identity``; true while it holds it."""

    def __init__(
        self,
        client: ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration_seconds: int = 300,
        clock: Clock = _utcnow,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_seconds = duration_seconds
        self._clock = clock
        self.collection = (
            f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
        )
        self.path = f"{self.collection}/{quote(name, safe='')}"

    def try_hold(self) -> bool:
        """Take the Lease if it is free or expired, renew it if ours. API errors are
        logged and read as "not holding": no replica audits on a Lease it cannot confirm."""
        try:
            return self._try_hold()
        except ApiError as exc:
            if exc.code != 409:
                log.warning("cannot take or renew the Lease %s: %s", self.path, exc)
            return False

    def _try_hold(self) -> bool:
        now = self._clock()
        try:
            current = self.client.get(self.path)
        except ApiError as exc:
            if exc.code != 404:
                raise
            self.client.send("POST", self.collection, self._body(now, None))
            log.info(
                "took the Lease %s", self.name, extra={"lease": self.name, "holder": self.identity}
            )
            return True
        spec = current.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if holder and holder != self.identity and not self._expired(spec, now):
            return False
        self.client.send("PUT", self.path, self._body(now, current))
        if holder != self.identity:
            log.info(
                "took the Lease %s",
                self.name,
                extra={"lease": self.name, "holder": self.identity, "previous": holder},
            )
        return True

    def release(self) -> None:
        """Give the Lease up on a clean stop, so another replica need not wait it out."""
        try:
            current = self.client.get(self.path)
            if (current.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            body = self._body(self._clock(), current)
            body["spec"] |= {"holderIdentity": "", "leaseDurationSeconds": 1}
            self.client.send("PUT", self.path, body)
        except ApiError as exc:
            log.info("the Lease %s was not released: %s", self.name, exc)

    def _expired(self, spec: Mapping[str, Any], now: dt.datetime) -> bool:
        renewed = _parse_time(spec.get("renewTime")) or _parse_time(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds")
        seconds = duration if isinstance(duration, int) else self.duration_seconds
        return renewed is None or now > renewed + dt.timedelta(seconds=seconds)

    def _body(self, now: dt.datetime, current: Mapping[str, Any] | None) -> dict[str, Any]:
        spec = dict((current or {}).get("spec") or {})
        taking = spec.get("holderIdentity") != self.identity
        transitions = spec.get("leaseTransitions")
        spec |= {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_seconds,
            "renewTime": micro_time(now),
        }
        if taking:
            spec["acquireTime"] = micro_time(now)
            if current is not None:
                spec["leaseTransitions"] = (transitions if isinstance(transitions, int) else 0) + 1
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }
