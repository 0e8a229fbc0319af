"""ResourceQuotas cross the inventory feed from the watcher to the workers with their scopes."""

from __future__ import annotations

from webhook.cluster.sources.feedwire import quota_records, quotas_from_records
from webhook.engine.resources.quotas import Quota, Scope


def test_a_quota_keeps_its_scopes_across_the_feed() -> None:
    quota = Quota(
        "ml",
        "q",
        {"requests.nvidia.com/gpu": 4},
        {"requests.nvidia.com/gpu": 1},
        (Scope("NotTerminating"), Scope("PriorityClass", "In", ("high",))),
    )
    wired = quotas_from_records(quota_records([quota]))
    assert wired is not None
    assert wired.by_namespace["ml"] == (quota,)
