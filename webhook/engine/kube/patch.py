"""Build an RFC 6902 JSON Patch while editing a copy-on-write view of the object.

Diffing whole objects (``jsonpatch.make_patch``) costs more than the rest of a review.
Here each edit is recorded as the operation that makes it, against the state left by the
operations before it, and only the containers on an edited path are copied: the original
object is never modified and untouched subtrees are shared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.kube.workloads import Path

_POINTERS: dict[Path, str] = {}


def pointer(path: Path) -> str:
    """A JSON Pointer (RFC 6901): ``~`` becomes ``~0`` first, then ``/`` becomes ``~1``."""
    known = _POINTERS.get(path)
    if known is None:
        known = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
        if len(_POINTERS) < 4096:  # paths repeat from pod to pod: a small memo
            _POINTERS[path] = known
    return known


def lookup(node: Any, path: Path) -> Any:
    """The value at ``path`` in a JSON document, or ``None`` where the path leads nowhere."""
    for part in path:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node


class Editor:
    def __init__(self, original: Mapping[str, Any]) -> None:
        self.original = original
        self.doc: Any = original
        self.ops: list[dict[str, Any]] = []
        # Copies made here, by id; holding them keeps ids from being reused by other objects.
        self._owned: dict[int, Any] = {}

    def get(self, path: Path) -> Any:
        return lookup(self.doc, path)

    def _own(self, path: Path) -> Any:
        """The container at ``path`` in the working document, copied once if shared."""
        owned, node = self._owned, self.doc
        if id(node) not in owned:
            node = self.doc = dict(node)
            owned[id(node)] = node
        for part in path:
            child = node[part]
            if id(child) not in owned:
                child = dict(child) if isinstance(child, dict) else list(child)
                node[part] = child
                owned[id(child)] = child
            node = child
        return node

    def add(self, path: Path, value: Any) -> None:
        """Set a map member or append to a list (``path`` ending in ``"-"``).

        Missing or null parents are created by one ``add`` of the whole missing branch,
        since RFC 6902 ``add`` fails under a missing parent.
        """
        last = len(path) - 1
        above = path[:-1]
        depth = last if _holds(lookup(self.doc, above), path[-1]) else 0
        # Otherwise walk down once: ``depth`` ends at the deepest prefix that can hold a key.
        node: Any = self.doc
        while depth < last and _holds(node, path[depth]):
            child = _child(node, path[depth])
            if not _holds(child, path[depth + 1]):
                break
            node = child
            depth += 1
        if depth < last:
            value = _branch(path[depth + 1 :], value)
            path = path[: depth + 1]
            if path[-1] == "-":
                raise ValueError(f"cannot append under missing list at {pointer(path)}")
            above = path[:-1]
        parent = self._own(above)
        key = path[-1]
        if isinstance(parent, list):
            if key == "-":
                parent.append(value)
            else:
                assert isinstance(key, int)
                parent.insert(key, value)
        else:
            parent[key] = value
        self.ops.append({"op": "add", "path": pointer(path), "value": value})

    def append(self, path: Path, item: Any) -> None:
        """Append to the list at ``path``, creating the list when it is missing or null."""
        if isinstance(self.get(path), list):
            self._own(path).append(item)
            self.ops.append({"op": "add", "path": pointer(path) + "/-", "value": item})
        else:
            self.add(path, [item])

    def replace(self, path: Path, value: Any) -> None:
        parent = self._own(path[:-1])
        parent[path[-1]] = value
        self.ops.append({"op": "replace", "path": pointer(path), "value": value})


def _child(node: Any, key: str | int) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return None


def _holds(parent: Any, key: str | int) -> bool:
    """Whether ``key`` can be added under ``parent`` (an ill-typed value is replaced)."""
    if isinstance(parent, dict):
        return isinstance(key, str)
    return isinstance(parent, list) and (key == "-" or isinstance(key, int))


def _branch(keys: Path, value: Any) -> Any:
    """The nested value that makes ``keys`` exist; ``-`` stands for a new one-item list."""
    for key in reversed(keys):
        value = [value] if key == "-" else {key: value}
    return value
