"""Decisions remembered per pod spec, so the replicas of one workload are judged once.

A Deployment scaled to 50 replicas, a Job with 100 completions or a RayCluster's workers
send the API server the same pod many times over, differing only in identity metadata
(name, uid, owner references) that the engine never reads (``IDENTITY_METADATA``). The
engine is a function of the object, the request's namespace and its labels, the policy
and the inventory snapshot, so its decision for an equal key is the same decision.

- Only CREATE is remembered: an UPDATE also depends on the old object, and is rare.
- The memo belongs to one (policy, snapshot, runtime classes): a rule reload, a new
  inventory snapshot or a RuntimeClass change empties it, so a remembered decision never
  outlives what it was made from.
- Next to a decision the memo keeps the service's answers made from it (``Judgement``), so
  a replica's answer is not built and encoded again.
- Keys are Python's own (keyed, per-process) hash of the object's JSON without identity
  metadata: a pod seen once pays a fifth of what a cryptographic digest costs. A kept
  decision also holds the 16-byte BLAKE2b digest of that JSON, and a hit is taken only
  when the digests agree, so two objects whose hashes collide (by chance, or crafted with
  a known ``PYTHONHASHSEED``) never share a decision: at worst one is kept early.
- Objects whose JSON exceeds ``max_object_bytes`` are not remembered: memory stays bounded
  by ``max_entries`` small decisions whatever the objects' sizes.
- A decision is kept from the second time its key is seen: the first sight leaves only the
  key (a doorkeeper, as in TinyLFU caches). Bare pods, Jobs with generated names and CI
  runners are seen once; keeping each of their decisions (and evicting an older one, out of
  cold memory) cost about a tenth of such a review. A workload's pods pay the engine twice
  instead of once, then share the decision.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from webhook.admission.response import Answer
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import IDENTITY_METADATA, InventoryView, Request
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.ruleset import Policy

Evaluate = Callable[..., Decision]
Key = tuple[str, tuple[tuple[str, str], ...] | None, int]


class Judgement:
    """A decision, and the answers the service made of it (one per endpoint)."""

    __slots__ = ("answers", "decision", "digest")

    def __init__(self, decision: Decision, digest: bytes = b"") -> None:
        self.decision = decision
        self.answers: dict[bool, Answer] = {}
        self.digest = digest  # of the object it was made for, when kept


class DecisionMemo:
    def __init__(
        self,
        *,
        max_entries: int = 1024,
        max_object_bytes: int = 64 * 1024,
        engine: Evaluate = evaluate,
        weak_hash: Callable[[bytes], int] = hash,
    ) -> None:
        self.max_entries = max_entries
        self.max_object_bytes = max_object_bytes
        self._engine = engine
        self._weak_hash = weak_hash
        self._lock = threading.Lock()
        self._context: tuple[Policy, Any, str, frozenset[str] | None] | None = None
        # Oldest first. OrderedDict, not dict: taking a dict's first key walks past every
        # entry deleted before it (until the dict is resized), about 1 us at 4,096 keys.
        self._judgements: OrderedDict[Key, Judgement] = OrderedDict()
        # Keys seen once and not yet kept (an ordered set).
        self._seen: OrderedDict[Key, None] = OrderedDict()
        self._max_seen = 4 * max_entries
        # Counted without the lock: exact for one thread, close enough for several.
        self.hits = 0
        self.misses = 0

    def judge(self, request: Request, *, policy: Policy, inventory: InventoryView) -> Judgement:
        """The engine's decision for ``request``, remembered when it can be, with the
        answers already made from it."""
        found = self._key(request)
        if found is None:
            return Judgement(self._engine(request, policy=policy, inventory=inventory))
        key, text = found
        context = (
            policy,
            # Quotas too (issue 26): a pod's quota notice reads what is used now.
            (inventory.snapshot, inventory.devices, inventory.quotas),
            inventory.problem,
            inventory.runtime_classes,
        )
        with self._lock:
            if not self._same_context(context):
                self._judgements.clear()
                self._seen.clear()
                self._context = context
            known = self._judgements.get(key)
            seen_before = known is None and self._saw(key)
        if known is not None:
            if known.digest == digest(text):
                self.hits += 1
                return known
            seen_before = False  # another object with the same hash: judged, not kept
        self.misses += 1
        decision = self._engine(request, policy=policy, inventory=inventory)
        if not seen_before:
            return Judgement(decision)
        # The mutated object is for ``check``'s readers; keeping it would pin the request.
        kept = Judgement(dataclasses.replace(decision, mutated=None), digest(text))
        with self._lock:
            if self._same_context(context):
                if len(self._judgements) >= self.max_entries:
                    self._judgements.popitem(last=False)
                self._judgements[key] = kept
        fresh = Judgement(decision)
        fresh.answers = kept.answers  # the answer made for this request is remembered too
        return fresh

    def _saw(self, key: Key) -> bool:
        """Whether ``key`` was seen once before (and is to be kept now); held under the lock."""
        if key in self._seen:
            del self._seen[key]
            return True
        if len(self._seen) >= self._max_seen:
            self._seen.popitem(last=False)
        self._seen[key] = None
        return False

    def _same_context(self, context: tuple[Policy, Any, str, frozenset[str] | None]) -> bool:
        # By reference: a freed snapshot's id may be reused by the next one.
        held = self._context
        return (
            held is not None
            and held[0] is context[0]
            and held[1][0] is context[1][0]
            and held[1][1] is context[1][1]
            and held[1][2] is context[1][2]
            and held[2] == context[2]
            and held[3] == context[3]
        )

    def _key(self, request: Request) -> tuple[Key, bytes] | None:
        if request.operation != "CREATE" or request.old_object is not None:
            return None
        try:
            text = orjson.dumps(_without_identity(request.object))
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (255): not remembered
            return None
        if len(text) > self.max_object_bytes:
            return None
        labels = request.namespace_labels
        key = (
            request.namespace,
            None if labels is None else tuple(sorted(labels.items())),
            self._weak_hash(text),
        )
        return key, text


# hashlib lets go of the interpreter lock to hash 2,048 bytes or more. A review thread
# that lets go of it may wait for it behind another thread's whole review (the benchmark's
# p99 showed it), and a pod's JSON is a few kilobytes: hash it in smaller pieces.
HASH_PIECE = 2047


def digest(text: bytes) -> bytes:
    """BLAKE2b-128 of ``text``, without letting go of the interpreter lock."""
    hasher = hashlib.blake2b(digest_size=16)
    view = memoryview(text)
    for start in range(0, len(view), HASH_PIECE):
        hasher.update(view[start : start + HASH_PIECE])
    return hasher.digest()


def _without_identity(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    present = IDENTITY_METADATA.intersection(meta)
    if not present:
        return obj
    kept = meta.copy()
    for name in present:
        del kept[name]
    return {**obj, "metadata": kept}
