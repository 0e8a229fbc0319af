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
- Keys are a 16-byte BLAKE2b digest of the object's JSON (without identity metadata), and
  objects whose JSON exceeds ``max_object_bytes`` are not remembered: memory stays bounded
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
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from webhook.admission.response import Answer
from webhook.engine.decision import Decision
from webhook.engine.evaluate import IDENTITY_METADATA, InventoryView, Request, evaluate
from webhook.engine.policy import Policy

Evaluate = Callable[..., Decision]
Key = tuple[str, tuple[tuple[str, str], ...] | None, bytes]


class Judgement:
    """A decision, and the answers the service made of it (one per endpoint)."""

    __slots__ = ("answers", "decision")

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.answers: dict[bool, Answer] = {}


class DecisionMemo:
    def __init__(
        self,
        *,
        max_entries: int = 1024,
        max_object_bytes: int = 64 * 1024,
        engine: Evaluate = evaluate,
    ) -> None:
        self.max_entries = max_entries
        self.max_object_bytes = max_object_bytes
        self._engine = engine
        self._lock = threading.Lock()
        self._context: tuple[Policy, Any, str, frozenset[str] | None] | None = None
        self._judgements: dict[Key, Judgement] = {}
        # Keys seen once and not yet kept, oldest first (a dict as an ordered set).
        self._seen: dict[Key, None] = {}
        self._max_seen = 4 * max_entries
        self.hits = 0
        self.misses = 0

    def judge(self, request: Request, *, policy: Policy, inventory: InventoryView) -> Judgement:
        """The engine's decision for ``request``, remembered when it can be, with the
        answers already made from it."""
        key = self._key(request)
        if key is None:
            return Judgement(self._engine(request, policy=policy, inventory=inventory))
        context = (
            policy,
            (inventory.snapshot, inventory.devices),
            inventory.problem,
            inventory.runtime_classes,
        )
        with self._lock:
            if not self._same_context(context):
                self._judgements.clear()
                self._seen.clear()
                self._context = context
            known = self._judgements.get(key)
            if known is not None:
                self.hits += 1
                return known
            self.misses += 1
            seen_before = key in self._seen
            if seen_before:
                del self._seen[key]
            else:
                if len(self._seen) >= self._max_seen:
                    del self._seen[next(iter(self._seen))]
                self._seen[key] = None
        decision = self._engine(request, policy=policy, inventory=inventory)
        if not seen_before:
            return Judgement(decision)
        # The mutated object is for ``check``'s readers; keeping it would pin the request.
        kept = Judgement(dataclasses.replace(decision, mutated=None))
        with self._lock:
            if self._same_context(context):
                if len(self._judgements) >= self.max_entries:
                    del self._judgements[next(iter(self._judgements))]
                self._judgements[key] = kept
        fresh = Judgement(decision)
        fresh.answers = kept.answers  # the answer made for this request is remembered too
        return fresh

    def _same_context(self, context: tuple[Policy, Any, str, frozenset[str] | None]) -> bool:
        # By reference: a freed snapshot's id may be reused by the next one.
        held = self._context
        return (
            held is not None
            and held[0] is context[0]
            and held[1][0] is context[1][0]
            and held[1][1] is context[1][1]
            and held[2] == context[2]
            and held[3] == context[3]
        )

    def _key(self, request: Request) -> Key | None:
        if request.operation != "CREATE" or request.old_object is not None:
            return None
        try:
            text = orjson.dumps(_without_identity(request.object))
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (255): not remembered
            return None
        if len(text) > self.max_object_bytes:
            return None
        labels = request.namespace_labels
        return (
            request.namespace,
            None if labels is None else tuple(sorted(labels.items())),
            digest(text),
        )


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
