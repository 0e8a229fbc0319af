"""Reading Kubernetes manifests from files: multi-document YAML, JSON and ``List`` kinds.

Errors name the file and line and never escape as tracebacks: a broken file is reported and
the rest still load.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.files.jsonvalues import TOO_DEEP, key_text, unusable

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# What YAML aliases may add to a file's values once expanded: a value, or 64 characters of
# a string, counts one. Real manifests and rule files use a few aliases (a list of
# tolerations reused); a "billion laughs" file nests them to expand a few lines into more
# memory than the machine has. go-yaml refuses "excessive aliasing" for the same reason.
MAX_ALIAS_EXPANSION = 100_000
_LONG_TEXT = 64
# A field's place in a document: keys and list indexes from its root.
FieldPath = tuple[str | int, ...]
# Findings name fields a few levels into a pod template (spec.jobTemplate.spec.template.spec
# .containers[0].resources.limits is 9): deeper fields are not mapped.
MAX_MAPPED_DEPTH = 12
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Document:
    """One object read from a file; ``index`` counts documents from 1 within the file,
    ``line`` is the first line of its YAML document (or of its item in a ``List``)."""

    source: str
    index: int
    obj: Mapping[str, Any]
    line: int = 1
    # The line of each field, when read with ``fields=True`` (for CI annotations).
    field_lines: Mapping[FieldPath, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def where(self) -> str:
        """``pods.yaml:12``, as compilers and CI annotations name a place."""
        return f"{self.source}:{self.line}"

    def line_of(self, path: str) -> int:
        """The line of the field a finding names (``spec.containers[0].resources``), else of
        the deepest part of it the file holds, else the document's first line."""
        line = self.line
        at_path: FieldPath = ()
        for name, index in _SEGMENT.findall(path):
            options: tuple[str | int, ...] = (int(index),) if index else (name,)
            if name.isdigit():
                options = (int(name), name)  # spec_path joins list indexes with dots
            step = next(((*at_path, o) for o in options if (*at_path, o) in self.field_lines), None)
            if step is None:
                break
            at_path, line = step, self.field_lines[step]
        return line


@dataclass(frozen=True, slots=True)
class ManifestError:
    source: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.message}"


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """Safe loading, with timestamps left as the strings Kubernetes keeps them as, and
    duplicate keys refused as kubectl refuses them (sigs.k8s.io/yaml is strict: "mapping
    key ... already defined"), where PyYAML would keep the last one silently."""

    # Number and boolean keys taken as their text; a manifests reader refuses them instead.
    number_keys = True

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, yaml.Mark] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            first = seen.setdefault(key_node.value, key_node.start_mark)
            if first is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f'key "{key_node.value}" appears twice (first on line {first.line + 1})',
                    key_node.start_mark,
                )
        # Keys become text as sigs.k8s.io/yaml writes them into JSON (``1: 2`` is
        # ``"1": 2``), at construction: as Python values, 1, 1.0 and true are one key.
        self.flatten_mapping(node)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            text = _key_text(key, number_keys=self.number_keys, mark=key_node.start_mark)
            if text is None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"a key that is not a string, number or boolean ({_kind(key)}): quote it",
                    key_node.start_mark,
                )
            mapping[text] = self.construct_object(value_node, deep=deep)
        return mapping


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _ManifestLoader(_Loader):
    """The loader of the objects ``check``, ``explain`` and ``audit -f`` judge (issue 41):
    a key that is a number or a boolean is refused, not taken as its text. kubectl would
    send ``limits: {1: 2}`` as ``"1": 2`` and the API server refuse the resource name
    ``1``; judging the text instead allowed it. Quoting the key says what is meant."""

    number_keys = False


class _KeyNotText(yaml.constructor.ConstructorError):
    """A key a manifest may not have: not a YAML error, an unusable object."""


def _key_text(key: object, *, number_keys: bool, mark: Any) -> str | None:
    """``key`` as text (``key_text``), or ``_KeyNotText`` where a number or boolean key is
    refused."""
    text = key_text(key)
    if number_keys or isinstance(key, str) or text is None:
        return text
    what = "true or false" if isinstance(key, bool) else "a number"
    problem = (
        f"the key {text} is {what}, not text: kubectl would send it as the text "
        f'"{text}"; quote it if that is what you mean'
    )
    raise _KeyNotText(None, None, problem, mark)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def parse_text(
    text: str, source: str, *, fields: bool = False, number_keys: bool = True
) -> tuple[list[Document], list[ManifestError]]:
    """All objects in ``text``; ``List`` kinds are expanded into their items. ``fields``:
    keep the line of every field of YAML documents (``Document.line_of``), which CI formats
    need and other readers would only pay memory for. ``number_keys``: take a key that is a
    number or a boolean as its text (rule files, inventories), else refuse it (manifests:
    ``_ManifestLoader``)."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            loaded: list[object] = [json.loads(text, object_pairs_hook=_unique_keys)]
        except _DuplicateKey as exc:
            return [], [ManifestError(source, f'key "{exc.args[0]}" appears twice in an object')]
        except json.JSONDecodeError as exc:
            # JSON is YAML: fall through so that YAML-ish files starting with { still load.
            if stripped.startswith("{") and not _looks_like_yaml(text):
                return [], [ManifestError(source, f"not valid JSON: {exc.msg}", exc.lineno)]
            return _parse_yaml(text, source, fields=fields, number_keys=number_keys)
        except RecursionError:
            return [], [ManifestError(source, TOO_DEEP)]
        except ValueError as exc:  # an integer of more digits than Python converts
            return [], [ManifestError(source, f"not usable: {str(exc)[:100]}")]
        return _documents(loaded, source, lines=[[1]], fields=[])
    return _parse_yaml(text, source, fields=fields, number_keys=number_keys)


_TEMPLATE_ACTION = re.compile(r"\{\{-?\s.*?\}\}|\{\{[.$]")


def _template_line(text: str) -> int:
    """The first line with a Go template action (``{{ .Values.x }}``, ``{{- if }}``), or 0."""
    for number, line in enumerate(text.splitlines(), start=1):
        if _TEMPLATE_ACTION.search(line):
            return number
    return 0


def _looks_like_yaml(text: str) -> bool:
    return "\n" in text.strip() and ":" in text.splitlines()[-1]


_Lines = list[list[int]]
_Fields = list[list[dict[FieldPath, int]]]


# Past this size a file is read from the parser's events, without the node graph.
EVENTS_FROM_BYTES = 1024 * 1024


class _NotPlain(Exception):
    """An anchor, alias, tag or merge key: read through the node graph instead."""


# An open container while events are read: the container, its pending key (a mapping's),
# whether it is a mapping, and the lines its keys were first seen on.
_Open = tuple[Any, list[str], bool, dict[str, int]]


def _scalar(loader: _Loader, event: yaml.ScalarEvent) -> object:
    """A scalar resolved and constructed as the node path does (timestamps stay text)."""
    if not (event.implicit[0] or event.implicit[1]) and event.tag not in (None, "!"):
        raise _NotPlain
    tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
    construct = loader.yaml_constructors.get(tag)
    if construct is None or tag == "tag:yaml.org,2002:merge":
        raise _NotPlain
    # Not construct_object: it would keep every scalar's node until the end.
    return construct(loader, yaml.ScalarNode(tag, event.value))


def _key(value: object, seen: dict[str, int], mark: Any, *, number_keys: bool) -> str:
    """A mapping key as ``_Loader.construct_mapping`` takes it, refused as it refuses."""
    text_key = _key_text(value, number_keys=number_keys, mark=mark)
    problem = ""
    if text_key is None:
        problem = f"a key that is not a string, number or boolean ({_kind(value)}): quote it"
    elif text_key in seen:
        problem = f'key "{text_key}" appears twice (first on line {seen[text_key]})'
    if problem:
        raise yaml.constructor.ConstructorError(None, None, problem, mark)
    assert text_key is not None
    seen[text_key] = mark.line + 1
    return text_key


def _starts_here(stack: list[_Open]) -> bool:
    """Whether a value starting now is the document, or an item of its ``items`` list."""
    return not stack or (len(stack) == 2 and stack[0][1] == ["items"] and not stack[1][2])


def _place(stack: list[_Open], value: object, mark: Any, *, number_keys: bool) -> None:
    container, pending, mapping, seen = stack[-1]
    if not mapping:
        container.append(value)
    elif not pending:
        pending.append(_key(value, seen, mark, number_keys=number_keys))
    else:
        container[pending.pop()] = value


def _load_events(
    text: str, loading: type[_Loader] = _Loader
) -> tuple[list[object], list[list[int]]]:
    """``_load_all`` for plain YAML (what ``kubectl get -o yaml`` prints: no anchors,
    aliases, tags or merge keys), built from the parser's events: composing the node graph
    of a 25,600-device inventory first peaked near 930 MiB, more than the pod's limit
    (events: 340 MiB). Scalars are resolved and constructed by the same loader, keys as
    ``construct_mapping`` takes them; anything else raises ``_NotPlain``."""
    loader = loading(text)
    loaded: list[object] = []
    lines: list[list[int]] = []
    stack: list[_Open] = []
    starts: list[int] = []
    try:
        while not loader.check_event(yaml.StreamEndEvent):
            event = loader.get_event()
            if isinstance(event, (yaml.StreamStartEvent, yaml.DocumentEndEvent)):
                continue
            if isinstance(event, yaml.DocumentStartEvent):
                starts = []
                continue
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise _NotPlain
            mark = event.start_mark
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if not event.implicit:
                    raise _NotPlain
                if _starts_here(stack):
                    starts.append(mark.line + 1)
                mapping = isinstance(event, yaml.MappingStartEvent)
                stack.append(({} if mapping else [], [], mapping, {}))
                continue
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                value = stack.pop()[0]
            elif isinstance(event, yaml.ScalarEvent):
                value = _scalar(loader, event)
                if _starts_here(stack):
                    starts.append(mark.line + 1)
            else:
                raise _NotPlain
            if stack:
                _place(stack, value, mark, number_keys=loading.number_keys)
            else:
                loaded.append(value)
                lines.append(starts)
    finally:
        loader.dispose()
    return loaded, lines


def _load_all(
    text: str, *, fields: bool, loading: type[_Loader] = _Loader
) -> tuple[list[object], _Lines, _Fields]:
    """Every document of ``text``, and per document the line it starts on, then the lines
    of its ``items`` (for a ``List``): ``yaml.load_all`` with the nodes' marks kept. With
    ``fields``, per document (or per item of a ``List``) the line of each field (the node
    graph is needed for those: a large file read for CI formats pays for it)."""
    if len(text) > EVENTS_FROM_BYTES and not fields:
        with contextlib.suppress(_NotPlain):
            loaded_events, event_lines = _load_events(text, loading)
            return loaded_events, event_lines, [[] for _ in loaded_events]
    loader = loading(text)
    loaded: list[object] = []
    lines: _Lines = []
    maps: _Fields = []
    try:
        while loader.check_node():
            node = loader.get_node()
            starts = [node.start_mark.line + 1]
            roots = [node]
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if key.value == "items" and isinstance(value, yaml.SequenceNode):
                        starts += [item.start_mark.line + 1 for item in value.value]
                        roots = [node, *value.value]
            loaded.append(loader.construct_document(node))
            lines.append(starts)
            maps.append([field_lines(root) for root in roots] if fields else [])
    finally:
        loader.dispose()
    return loaded, lines, maps


def field_lines(root: yaml.Node) -> dict[FieldPath, int]:
    """The line of each field under ``root``: a key's own line, a list item's first line.
    A node met again through an alias is mapped once, where it was defined."""
    found: dict[FieldPath, int] = {}
    seen: set[int] = set()
    stack: list[tuple[FieldPath, yaml.Node]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if id(node) in seen or len(path) >= MAX_MAPPED_DEPTH:
            continue
        seen.add(id(node))
        children: list[tuple[FieldPath, yaml.Node]] = []
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    here = (*path, key.value)
                    found.setdefault(here, key.start_mark.line + 1)
                    children.append((here, value))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                if isinstance(item, (yaml.MappingNode, yaml.SequenceNode)):
                    found[(*path, index)] = item.start_mark.line + 1
                    children.append(((*path, index), item))
        stack.extend(reversed(children))  # in the file's order: an anchor before its aliases
    return found


def _parse_yaml(
    text: str, source: str, *, fields: bool, number_keys: bool = True
) -> tuple[list[Document], list[ManifestError]]:
    loading = _Loader if number_keys else _ManifestLoader
    try:
        loaded, lines, maps = _load_all(text, fields=fields, loading=loading)
    except _KeyNotText as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        return [], [ManifestError(source, f"not usable: {exc.problem}", line)]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"not valid YAML: {problem}" + (f" ({context})" if context else "")
        template = _template_line(text)
        if template:
            # Helm's {{ ... }} actions are not YAML until rendered.
            message = (
                f"looks like an unrendered Helm template ({{{{ ... }}}} on line {template}): "
                "render it with helm template first"
            )
            return [], [ManifestError(source, message, template)]
        return [], [ManifestError(source, message, mark.line + 1 if mark else None)]
    except RecursionError:
        return [], [ManifestError(source, TOO_DEEP)]
    except ValueError as exc:  # an integer of more digits than Python converts
        return [], [ManifestError(source, f"not usable: {str(exc)[:100]}")]
    try:
        extra = alias_expansion(loaded)
    except AliasLoopError:
        return [], [ManifestError(source, "a YAML alias refers to a value that contains it")]
    if extra > MAX_ALIAS_EXPANSION:
        message = (
            f"YAML aliases expand to more than {MAX_ALIAS_EXPANSION:,} extra values "
            f"({extra:,}); write the values out, or use fewer aliases"
        )
        return [], [ManifestError(source, message)]
    return _documents(loaded, source, lines=lines, fields=maps)


class AliasLoopError(ValueError):
    """A value contains itself through an alias: it has no finite expansion."""


def alias_expansion(root: object) -> int:
    """How much YAML aliases add to ``root`` once expanded: the size of the value as a tree
    minus its size as loaded, where an alias is one shared object. Sizes count a value as
    one, a string as one per 64 characters. Linear in the objects loaded, without
    recursion; ``AliasLoopError`` for a value that contains itself."""
    expanded: dict[int, int] = {}  # container id -> its size as a tree
    seen_text: set[int] = set()
    loaded = 0
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(root, False)]
    while stack:
        obj, children_done = stack.pop()
        if not isinstance(obj, (dict, list)):
            continue
        key = id(obj)
        items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
        if children_done:
            on_path.discard(key)
            size = 1
            loaded += 1
            for item in items:
                if isinstance(item, (dict, list)):
                    size += expanded[id(item)]
                    continue
                weight = _weight(item)
                size += weight
                if weight > 1 and id(item) in seen_text:
                    continue  # a long string met before: the same object through an alias
                seen_text.add(id(item))
                loaded += weight
            expanded[key] = size
            continue
        if key in expanded:
            continue
        if key in on_path:
            raise AliasLoopError(key)
        on_path.add(key)
        stack.append((obj, True))
        stack.extend((item, False) for item in items if isinstance(item, (dict, list)))
    return expanded.get(id(root), 0) - loaded


def _weight(value: object) -> int:
    return 1 + len(value) // _LONG_TEXT if isinstance(value, str) else 1


def _documents(
    loaded: list[object], source: str, *, lines: _Lines, fields: _Fields
) -> tuple[list[Document], list[ManifestError]]:
    docs: list[Document] = []
    errors: list[ManifestError] = []
    for number, (raw, starts) in enumerate(zip(loaded, lines, strict=True)):
        if raw is None:
            continue
        line = starts[0]
        maps = fields[number] if number < len(fields) else []
        if not isinstance(raw, Mapping):
            errors.append(
                ManifestError(
                    source, f"document {len(docs) + 1} is not an object but {_kind(raw)}", line
                )
            )
            continue
        problem = unusable(raw)
        if problem:
            errors.append(ManifestError(source, problem, line))
            continue
        list_kind = str(raw.get("kind", ""))
        if list_kind.endswith("List") and isinstance(raw.get("items"), list):
            # The API server leaves kind and apiVersion out of a typed list's items.
            item_kind = list_kind.removesuffix("List")
            item_lines = starts[1:] if len(starts) == len(raw["items"]) + 1 else []
            item_maps = maps[1:] if item_lines and len(maps) == len(starts) else []
            for position, item in enumerate(raw["items"]):
                if not isinstance(item, Mapping):
                    continue
                at = item_lines[position] if item_lines else line
                where = item_maps[position] if item_maps else {}
                obj = item
                if item_kind and "kind" not in item:
                    filled = {"apiVersion": raw.get("apiVersion", "v1"), "kind": item_kind}
                    obj = {**filled, **item}
                docs.append(Document(source, len(docs) + 1, obj, at, where))
            continue
        docs.append(Document(source, len(docs) + 1, raw, line, maps[0] if maps else {}))
    return docs, errors


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def expand_paths(paths: list[str]) -> Iterator[str]:
    """Files as given, directories walked in name order for manifest files, ``-`` as stdin."""
    for raw in paths:
        if raw == "-":
            yield raw
            continue
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix in MANIFEST_SUFFIXES:
                    yield str(child)
        else:
            yield raw


def read_source(source: str) -> tuple[str | None, ManifestError | None]:
    """The text of a file (or of stdin for ``-``), or why it cannot be had."""
    data, error = read_bytes(source)
    if data is None:
        return None, error
    return decode(data, source)


def decode(data: bytes, source: str) -> tuple[str | None, ManifestError | None]:
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, ManifestError(source, f"not UTF-8 text ({exc.reason} at byte {exc.start})")


# What one file (or stdin) may hold. The API server stores objects up to 3 MiB; a file of
# manifests, a `kubectl get -o yaml` list or an inventory of nodes holds several, and
# parsing a file takes ten to twenty times its size. Past this a file is refused unread:
# `check /dev/zero` used to read until a MemoryError.
MAX_FILE_BYTES = 64 * 1024 * 1024
_READ_PIECE = 1024 * 1024
_A_DIRECTORY = "is a directory, not a file: name a file"
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_bytes(
    source: str, *, limit: int = MAX_FILE_BYTES, too_large: str = ""
) -> tuple[bytes | None, ManifestError | None]:
    """The bytes of a regular file, at most ``limit`` of them, or why not; ``-`` is stdin.

    The file is opened with ``O_NONBLOCK`` and judged by ``fstat`` of what was opened: a
    FIFO opens at once without a writer (a plain open would wait for one forever), and the
    object judged is the object read, where a ``stat`` before ``open`` would leave a gap in
    which the path could be swapped for a FIFO. ``O_NOCTTY``: a terminal device given as a
    path never becomes the process's controlling terminal. ``too_large``: what to say of a
    file over ``limit``, when the reader knows better than "split it"."""
    if source == "-":
        if sys.stdin is None:
            return None, ManifestError(source, "standard input is closed: name a file")
        return _bounded(sys.stdin.buffer.read, source, limit, what="standard input")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(source, flags)
    except FileNotFoundError:
        return None, ManifestError(source, "no such file")
    except IsADirectoryError:
        return None, ManifestError(source, _A_DIRECTORY)
    except OSError as exc:
        return None, ManifestError(source, f"cannot be read: {exc.strerror}")
    try:
        status = os.fstat(fd)
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            return None, ManifestError(source, _A_DIRECTORY)
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            return None, ManifestError(
                source,
                f"is {kind}, not a regular file: name a regular file, or pipe it in as - "
                "(standard input)",
            )
        if status.st_size > limit:
            return None, _too_large(source, limit, what="the file", said=too_large)
        os.set_blocking(fd, True)
        return _bounded(
            lambda size: os.read(fd, size), source, limit, what="the file", said=too_large
        )
    except OSError as exc:
        return None, ManifestError(source, f"cannot be read: {exc.strerror}")
    finally:
        os.close(fd)


def _bounded(
    read: Callable[[int], bytes], source: str, limit: int, *, what: str, said: str = ""
) -> tuple[bytes | None, ManifestError | None]:
    """All of a stream if it holds at most ``limit`` bytes, read in pieces (a file may grow
    while it is read, so its size from ``fstat`` is not trusted)."""
    pieces: list[bytes] = []
    total = 0
    while total <= limit:
        piece = read(min(_READ_PIECE, limit + 1 - total))
        if not piece:
            return b"".join(pieces), None
        pieces.append(piece)
        total += len(piece)
    return None, _too_large(source, limit, what=what, said=said)


def _too_large(source: str, limit: int, *, what: str, said: str = "") -> ManifestError:
    if said:
        return ManifestError(source, said)
    return ManifestError(
        source,
        f"{what} holds more than {limit // (1024 * 1024)} MiB, more than gpu-webhook reads "
        "from one file or stream: split it into several files",
    )


def located(doc: Document) -> Document:
    """``doc`` with the line of each of its fields, read again from its file when it was
    loaded without them (only the few objects a refusal must place pay for it); as it was
    when the file cannot be read again (stdin) or no longer holds it."""
    if doc.field_lines or doc.source == "-":
        return doc
    text, error = read_source(doc.source)
    if error is not None or text is None:
        return doc
    again, _ = parse_text(text, doc.source, fields=True)
    return next((d for d in again if d.index == doc.index and d.line == doc.line), doc)


def load_manifests(
    paths: list[str], *, fields: bool = False
) -> tuple[list[Document], list[ManifestError]]:
    """Every object of ``paths``; ``fields`` as for ``parse_text``."""
    docs: list[Document] = []
    errors: list[ManifestError] = []
    for source in expand_paths(paths):
        text, error = read_source(source)
        if error is not None or text is None:
            errors.append(error or ManifestError(source, "empty"))
            continue
        found, problems = parse_text(text, source, fields=fields, number_keys=False)
        docs.extend(found)
        errors.extend(problems)
    return docs, errors
