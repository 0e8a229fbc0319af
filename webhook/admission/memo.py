"""Decisions remembered per pod spec, so the replicas of one workload are judged once.

A Deployment scaled to 50 replicas, a Job with 100 completions or a RayCluster's workers
send the API server the same pod many times over, differing only in identity metadata
(name, uid, owner references) that the engine never reads (``IDENTITY_METADATA``). The
engine is a function of the object, the request's namespace and its labels, the policy
and the inventory snapshot, so its decision for an equal key is the same decision.

- Only CREATE is remembered: an UPDATE also depends on the old object, and is rare.
- The memo belongs to one (policy, snapshot, runtime classes, autoscaler pools): a rule
  reload, a new inventory snapshot, a RuntimeClass or pool change empties it, so a
  remembered decision never outlives what it was made from.
- Next to a decision the memo keeps the service's answers made from it (``Judgement``), so
  a replica's answer is not built and encoded again.
- Keys are Python's own (keyed, per-process) hash of the object's JSON without identity
  metadata: a pod seen once pays a fifth of what a cryptographic digest costs. A kept
  decision also holds the 16-byte BLAKE2b digest of that JSON, and a hit is taken only
  when the digests agree, so two objects whose hashes collide (by chance, or crafted with
  a known ``PYTHONHASHSEED``) never share a decision: at worst one is kept early.
- The memo is bounded in bytes (``max_bytes``), not only in entries: an entry is charged,
  once when it is kept and once per answer added to it, what it really holds (its key, its
  digest, the decision's findings, warnings and patch, the answers' encoded bytes), counted
  on the high side of what ``tracemalloc`` measures (``entry_cost``), and the oldest entries
  leave while the total is over the bound. An entry that would cost more than
  ``max_entry_bytes`` is not kept at all (a pod with thousands of containers is judged each
  time rather than pushing out every other workload's decision). Objects whose JSON exceeds
  ``max_object_bytes`` are not even looked up.
- A decision is kept from the second time its key is seen: the first sight leaves only the
  key (a doorkeeper, as in TinyLFU caches). Bare pods, Jobs with generated names and CI
  runners are seen once; keeping each of their decisions (and evicting an older one, out of
  cold memory) cost about a tenth of such a review. A workload's pods pay the engine twice
  instead of once, then share the decision.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
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

MIB = 1024 * 1024
# The decision memos of one pod share this much: each of N workers gets 1/N of it. Chosen
# from the container's memory limit (384Mi, deploy/base/deployment.yaml): the pod measured
# about 270 MiB at peak without the memo (eight 6 MiB reviews at once, docs/server.md), and
# 64 MiB of kept decisions, plus what the allocator does not hand back, stays below it.
POD_MEMO_BYTES = 64 * MIB
# A kept entry may take at most this share of its memo's bound: at least 32 entries fit.
ENTRY_SHARE = 32


def memo_bytes_per_worker(workers: int) -> int:
    """Each worker's share of the pod's ``POD_MEMO_BYTES``."""
    return POD_MEMO_BYTES // max(1, workers)


class Judgement:
    """A decision, and the answers the service made of it (one per endpoint)."""

    __slots__ = ("answers", "cost", "decision", "digest", "entry", "key")

    def __init__(self, decision: Decision, digest: bytes = b"") -> None:
        self.decision = decision
        self.answers: dict[bool, Answer] = {}
        self.digest = digest  # of the object it was made for, when kept
        # A kept entry has its key and cost; the judgement made for the request that kept
        # it names the entry whose answers it shares. (A kept entry never names itself: a
        # cycle would outlive its eviction until a full garbage collection.)
        self.key: Key | None = None
        self.cost = 0
        self.entry: Judgement | None = None


class DecisionMemo:
    def __init__(
        self,
        *,
        max_entries: int = 1024,
        max_bytes: int = POD_MEMO_BYTES // 2,
        max_entry_bytes: int | None = None,
        max_object_bytes: int = 64 * 1024,
        engine: Evaluate = evaluate,
        weak_hash: Callable[[bytes], int] = hash,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = (
            max_bytes // ENTRY_SHARE if max_entry_bytes is None else max_entry_bytes
        )
        self.max_object_bytes = max_object_bytes
        # What the kept entries cost, as ``entry_cost`` and ``answer_cost`` count it.
        self.bytes = 0
        self._engine = engine
        self._weak_hash = weak_hash
        self._lock = threading.Lock()
        self._context: tuple[Policy, Any, str, frozenset[str] | None, object] | None = None
        # Oldest first. OrderedDict, not dict: taking a dict's first key walks past every
        # entry deleted before it (until the dict is resized), about 1 us at 4,096 keys.
        self._judgements: OrderedDict[Key, Judgement] = OrderedDict()
        # Keys seen once and not yet kept (an ordered set), by their hash: a key holds the
        # namespace's labels, and 4,096 of them must not cost what 4,096 label sets do. Two
        # keys of one hash only make a decision kept from its first sight.
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._max_seen = 4 * max_entries
        # Counted without the lock: exact for one thread, close enough for several.
        self.hits = 0
        self.misses = 0

    def judge(self, request: Request, *, policy: Policy, inventory: InventoryView) -> Judgement:
        """The engine's decision for ``request``, remembered when it can be, with the
        answers already made from it."""
        # A GPUPolicyException reads what replicas differ in (the object's name) and the
        # review's time (its expiry): in its namespace every review is judged.
        found = None if _excepted(request, policy) else self._key(request)
        if found is None:
            return Judgement(self._engine(request, policy=policy, inventory=inventory))
        key, text = found
        context = (
            policy,
            # Quotas too (issue 26): a pod's quota notice reads what is used now.
            # and which RuntimeClasses run NVIDIA's runtime (issue 35).
            (
                inventory.snapshot,
                inventory.devices,
                inventory.quotas,
                inventory.nvidia_runtime_classes,
            ),
            inventory.problem,
            inventory.runtime_classes,
            inventory.pools,  # nodes that could exist (issue 23): a pool change is a change
        )
        with self._lock:
            if not self._same_context(context):
                self._judgements.clear()
                self._seen.clear()
                self.bytes = 0
                self._context = context
            known = self._judgements.get(key)
            seen_before = known is None and self._saw(hash(key))
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
        cost = entry_cost(key, kept.decision)
        if cost > self.max_entry_bytes:
            return Judgement(decision)
        kept.key, kept.cost = key, cost
        with self._lock:
            if self._same_context(context):
                if len(self._judgements) >= self.max_entries:
                    self._drop_oldest()
                self._judgements[key] = kept
                self.bytes += cost
                self._shrink()
        fresh = Judgement(decision)
        fresh.answers = kept.answers  # the answer made for this request is remembered too
        fresh.entry = kept
        return fresh

    def keep_answer(self, judgement: Judgement, *, mutate: bool, answer: Answer) -> None:
        """Remember ``answer`` with ``judgement``, and charge it to the memo when the
        judgement is a kept entry's: an entry that grows past ``max_entry_bytes`` leaves."""
        entry = judgement if judgement.key is not None else judgement.entry
        if entry is None:
            judgement.answers[mutate] = answer
            return
        cost = answer_cost(answer)
        with self._lock:
            old = entry.answers.get(mutate)
            entry.answers[mutate] = answer
            key = entry.key
            if key is None or self._judgements.get(key) is not entry:
                return  # dropped meanwhile: nothing to charge
            grown = cost - (0 if old is None else answer_cost(old))
            entry.cost += grown
            self.bytes += grown
            if entry.cost > self.max_entry_bytes:
                del self._judgements[key]
                self.bytes -= entry.cost
            self._shrink()

    def _shrink(self) -> None:
        """Drop the oldest entries while the total is over the bound; held under the lock."""
        while self.bytes > self.max_bytes and self._judgements:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, oldest = self._judgements.popitem(last=False)
        self.bytes -= oldest.cost

    def _saw(self, key: int) -> bool:
        """Whether ``key`` was seen once before (and is to be kept now); held under the lock."""
        if key in self._seen:
            del self._seen[key]
            return True
        if len(self._seen) >= self._max_seen:
            self._seen.popitem(last=False)
        self._seen[key] = None
        return False

    def _same_context(
        self, context: tuple[Policy, Any, str, frozenset[str] | None, object]
    ) -> bool:
        # By reference: a freed snapshot's id may be reused by the next one.
        held = self._context
        return (
            held is not None
            and held[0] is context[0]
            and held[1][0] is context[1][0]
            and held[1][1] is context[1][1]
            and held[1][2] is context[1][2]
            and held[1][3:] == context[1][3:]
            and held[2] == context[2]
            and held[3] == context[3]
            and held[4] is context[4]
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


# What the parts of an entry cost beyond the lengths counted, each rounded up from what
# tracemalloc measured on CPython 3.11 to 3.13 (tests/admission/test_memo.py checks that the
# count stays above the measure for large pods of every shape the rules judge): an entry
# with its key, digest, decision and answer objects; a finding and each of its strings; a
# patch, as a multiple of its JSON (dicts, lists and short strings cost several times the
# text they encode).
ENTRY_BYTES = 2048
FINDING_BYTES = 160
TEXT_BYTES = 80
PATCH_PER_JSON_BYTE = 8
ANSWER_BYTES = 512


def entry_cost(key: Key, decision: Decision) -> int:
    """The bytes an entry holds for ``decision`` under ``key``, before any answer. Once per
    kept entry, in time linear in the decision: far less than the engine took to make it."""
    cost = ENTRY_BYTES + _text_cost(key[0])
    if key[1] is not None:
        cost += sum(TEXT_BYTES + _text_cost(name) + _text_cost(value) for name, value in key[1])
    for finding in decision.findings:
        cost += (
            FINDING_BYTES
            + _text_cost(finding.message)
            + _text_cost(finding.summary)
            + _text_cost(finding.path)
        )
    cost += sum(map(_text_cost, decision.warnings))
    cost += sum(map(_text_cost, decision.notices))
    cost += sum(_text_cost(k) + _text_cost(v) for k, v in decision.audit.items())
    if decision.patch:
        try:
            encoded = orjson.dumps(list(decision.patch), default=_plain)
        except orjson.JSONEncodeError:  # not what the answer could encode either: never kept
            return sys.maxsize
        cost += PATCH_PER_JSON_BYTE * len(encoded)
    return cost


def answer_cost(answer: Answer) -> int:
    """The bytes an answer adds to an entry: its encoded reply and the rules it names (its
    findings and warnings are the decision's own)."""
    encoded = answer.reply
    return (
        ANSWER_BYTES
        + len(encoded.head)
        + len(encoded.tail)
        + sum(map(_text_cost, answer.rules_fired))
    )


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def _text_cost(text: str) -> int:
    # str.isascii() reads a flag; a string with other characters takes up to 4 bytes each.
    return TEXT_BYTES + (len(text) if text.isascii() else 4 * len(text))


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


def _excepted(request: Request, policy: Policy) -> bool:
    if not policy.exceptions:
        return False
    namespace = request.effective_namespace
    return any(e.namespace == namespace for e in policy.exceptions)
