"""Runtime sync of the webhooks' ``matchConditions`` (issue 43): the replica holding the
Lease writes the conditions of the rules in force, and of the nodes as they are, into its
own two webhook configurations, by name, and nothing else.

The nodes matter: the conditions that skip pods asking for no GPU hold only while every
GPU node is tainted (``engine.evaluation.matchconditions.gpu_nodes_tainted``); the holder
writes them while the inventory keeps that promise and writes ``true`` (call everything)
as soon as it does not. Each write is a JSON Patch whose ``test`` operations pin the
``resourceVersion`` read and the webhook's name at its index: a configuration changed
meanwhile (a Helm upgrade, Argo CD's self-heal) makes the write fail with 409 or 422, and
the next turn reads it again. RBAC: ``get`` and ``patch`` on
``mutatingwebhookconfigurations`` and ``validatingwebhookconfigurations`` with
``resourceNames: [gpu-webhook]`` (docs/deploy.md, "Match conditions").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from webhook.cluster.apiclient import ApiClient, ApiError
from webhook.cluster.lease import Lease

log = logging.getLogger("gpu_webhook.conditionsync")
GROUP_PATH = "/apis/admissionregistration.k8s.io/v1"
# (resource, the webhook of ours it holds that gets conditions)
CONFIGURATIONS = (
    ("mutatingwebhookconfigurations", "mutate.gpu-webhook.io"),
    ("validatingwebhookconfigurations", "validate.gpu-webhook.io"),
)
Conditions = Mapping[str, Sequence[Mapping[str, str]]]


class ConditionSync:
    """``sync(conditions)``: while holding the Lease, make each configuration's webhook
    carry ``conditions[webhook name]`` (absent or empty: none)."""

    def __init__(self, client: ApiClient, *, lease: Lease, name: str = "gpu-webhook") -> None:
        self.client = client
        self.lease = lease
        self.name = name

    def sync(self, conditions: Conditions) -> list[str]:
        """The configurations patched this turn (none when another replica holds the
        Lease, or all are as wanted). API errors are logged: the next turn tries again."""
        if not self.lease.try_hold():
            return []
        patched = []
        for resource, webhook in CONFIGURATIONS:
            path = f"{GROUP_PATH}/{resource}/{quote(self.name, safe='')}"
            try:
                if self._sync_one(path, webhook, list(conditions.get(webhook) or ())):
                    patched.append(resource)
            except ApiError as exc:
                log.warning("match conditions of %s not written: %s", path, exc)
        return patched

    def _sync_one(self, path: str, webhook: str, wanted: list[Mapping[str, str]]) -> bool:
        current = self.client.get(path)
        hooks = current.get("webhooks") or []
        index = next(
            (i for i, w in enumerate(hooks) if isinstance(w, dict) and w.get("name") == webhook),
            None,
        )
        if index is None:
            log.warning("%s has no webhook %s: its match conditions not written", path, webhook)
            return False
        have = hooks[index].get("matchConditions") or []
        if list(have) == wanted:
            return False
        version = (current.get("metadata") or {}).get("resourceVersion")
        ops: list[Mapping[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "test", "path": f"/webhooks/{index}/name", "value": webhook},
        ]
        at = f"/webhooks/{index}/matchConditions"
        if wanted:
            ops.append({"op": "add", "path": at, "value": wanted})
        else:
            ops.append({"op": "remove", "path": at})
        self.client.patch(path, ops)
        log.info("match conditions of %s written (%d)", path, len(wanted))
        return True
