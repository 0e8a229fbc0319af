"""Manifest files: YAML aliases are expanded only within a small budget (issue 11, item 6)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import ROOT, billion_laughs
from webhook.files import manifests
from webhook.files.inventoryfile import InventoryFileError, load_inventory
from webhook.files.manifests import MAX_ALIAS_EXPANSION, alias_expansion, parse_text


def test_a_billion_laughs_is_refused_without_expanding_it():
    docs, errors = parse_text(billion_laughs(), "lol.yaml")

    assert docs == []
    (error,) = errors
    assert str(error).startswith("lol.yaml: YAML aliases expand to more than 100,000")


def test_one_long_string_repeated_through_aliases_counts_by_its_length():
    text = 'x: &s "' + "y" * 100_000 + '"\nl: [' + ",".join(["*s"] * 200) + "]\n"

    _, errors = parse_text(text, "strings.yaml")

    assert "YAML aliases expand" in str(errors[0])


def test_a_few_aliases_as_people_write_them_are_fine():
    text = "t: &t [{key: nvidia.com/gpu, operator: Exists}]\na: {tolerations: *t}\nb: *t\n"

    docs, errors = parse_text(text, "ok.yaml")

    assert errors == []
    assert docs[0].obj["b"] == docs[0].obj["a"]["tolerations"]


def test_a_value_that_contains_itself_is_refused():
    _, errors = parse_text("x: &a [1, *a]\n", "loop.yaml")

    assert "refers to a value that contains it" in str(errors[0])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: " + "1" * 5000 + "\n", "not usable", id="integer-too-long"),
        pytest.param("a: " + "[" * 5000 + "]" * 5000 + "\n", "nest", id="nested-too-deeply"),
    ],
)
def test_yaml_python_cannot_build_is_an_error_not_a_traceback(text, message):
    _, errors = parse_text(text, "odd.yaml")

    assert message in str(errors[0])


def test_an_unaliased_file_expands_to_nothing_extra():
    assert alias_expansion({"a": [1, 2, {"b": "c" * 1000}], "d": "e"}) == 0
    assert MAX_ALIAS_EXPANSION >= 10_000


def test_an_inventory_bomb_is_an_inventory_error_naming_the_file(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text(billion_laughs())

    with pytest.raises(InventoryFileError, match=r"nodes\.yaml: YAML aliases expand"):
        load_inventory(str(path))


# --- the line of each field, for CI annotations ------------------------------------------

FIELDS = """\
# two objects; the second one's container is deep in a CronJob
apiVersion: v1
kind: Pod
metadata: {name: a}
spec:
  containers:
  - name: main
    image: cuda
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: sidecar
            image: busybox
          - name: train
            image: cuda
            resources:
              limits:
                nvidia.com/gpu: 1
"""


@pytest.mark.parametrize(
    ("document", "path", "line"),
    [
        pytest.param(0, "spec.containers[0]", 7, id="first-document-container"),
        pytest.param(0, "", 2, id="no-path-is-the-document"),
        pytest.param(1, "spec.jobTemplate.spec.template.spec", 19, id="pod-spec-deep-in-a-cronjob"),
        pytest.param(
            1, "spec.jobTemplate.spec.template.spec.containers[1]", 23, id="second-container"
        ),
        pytest.param(
            1,
            "spec.jobTemplate.spec.template.spec.containers[1].resources",
            25,
            id="resources-block",
        ),
        pytest.param(
            1,
            "spec.jobTemplate.spec.template.spec.containers[1].resources.limits.nvidia.com/gpu",
            26,
            id="a-key-with-dots-stops-at-the-deepest-field-found",
        ),
        pytest.param(
            1,
            "spec.jobTemplate.spec.template.spec.initContainers[0]",
            19,
            id="absent-field-falls-back-to-its-parent",
        ),
        pytest.param(1, "spec.replicatedJobs.0.template", 14, id="absent-below-spec-is-spec"),
        pytest.param(1, "status", 10, id="absent-entirely-is-the-document"),
    ],
)
def test_a_finding_s_path_is_the_line_of_its_field(document: int, path: str, line: int) -> None:
    docs, errors = parse_text(FIELDS, "objects.yaml", fields=True)

    assert errors == []
    assert docs[document].line_of(path) == line


def test_list_indexes_joined_with_dots_find_their_item() -> None:
    text = "kind: JobSet\nspec:\n  replicatedJobs:\n  - name: a\n  - name: b\n    template: {}\n"
    (doc,), _ = parse_text(text, "jobset.yaml", fields=True)

    assert doc.line_of("spec.replicatedJobs.1.template") == 6


def test_the_items_of_a_list_get_their_own_lines() -> None:
    text = (
        "apiVersion: v1\nkind: PodList\nitems:\n"
        "- metadata: {name: a}\n  spec:\n    containers:\n    - name: x\n"
        "- metadata: {name: b}\n  spec:\n    containers:\n    - name: y\n"
    )
    docs, _ = parse_text(text, "list.yaml", fields=True)

    assert [d.line_of("spec.containers[0]") for d in docs] == [7, 11]


def test_without_fields_or_from_json_every_path_is_the_document_s_line() -> None:
    docs, _ = parse_text(FIELDS, "objects.yaml")
    (json_doc,), _ = parse_text(
        '{"kind": "Pod", "spec": {"containers": [{"name": "a"}]}}', "p.json", fields=True
    )

    assert docs[1].line_of("spec.jobTemplate.spec.template.spec.containers[1]") == 10
    assert json_doc.line_of("spec.containers[0]") == 1


def test_a_shared_alias_is_mapped_where_it_was_written() -> None:
    text = "a: &c {containers: [{name: x}]}\nb: *c\n"
    (doc,), _ = parse_text(text, "alias.yaml", fields=True)

    assert doc.line_of("a.containers[0]") == 1
    assert doc.line_of("b.containers[0]") == 2  # the alias itself, the deepest found


YAML_FILES = sorted(
    [
        *(ROOT / "tests" / "cases" / "_inventories").glob("*.yaml"),
        *(ROOT / "examples").glob("*.yaml"),
        *(ROOT / "rules").glob("*.yaml"),
        *(ROOT / "tests" / "corpus").rglob("*.yaml"),
    ]
)


def _read(load: Any, text: str) -> object:
    """What a reader gives, or the kind of error it raises."""
    try:
        return load(text)
    except yaml.YAMLError as exc:
        return type(exc)


def _through_nodes(text: str) -> object:
    saved = manifests.EVENTS_FROM_BYTES
    manifests.EVENTS_FROM_BYTES = 10**12
    try:
        return _read(lambda t: manifests._load_all(t, fields=False)[:2], text)
    finally:
        manifests.EVENTS_FROM_BYTES = saved


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in YAML_FILES])
def test_large_files_read_from_events_give_what_the_node_graph_gives(path):
    """Issue 35: a large file is read from the parser's events (the node graph of a
    25,600-device inventory peaked near 930 MiB); the two readers must agree, values and
    lines, on every real file (one with anchors or tags is read through nodes anyway)."""
    text = path.read_text()
    try:
        events = _read(manifests._load_events, text)
    except manifests._NotPlain:
        return
    assert events == _through_nodes(text)


@settings(max_examples=200, deadline=None)
@given(
    value=st.recursive(
        st.one_of(
            st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
        ),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=20,
    )
)
def test_any_dumped_value_reads_the_same_from_events_and_nodes(value):
    text = yaml.safe_dump({"kind": "List", "items": [value, {"a": value}]})
    try:
        events = _read(manifests._load_events, text)
    except manifests._NotPlain:
        return
    assert events == _through_nodes(text)


def test_a_merge_key_is_read_through_the_node_graph_even_in_a_large_file(monkeypatch):
    monkeypatch.setattr(manifests, "EVENTS_FROM_BYTES", 0)

    (doc,), errors = parse_text("base: &b {a: 1}\nm:\n  <<: *b\n  c: 2\n", "merge.yaml")

    assert errors == []
    assert doc.obj["m"] == {"a": 1, "c": 2}


POD_WITH_A_NUMBER_KEY = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: c
    image: i
    resources:
      limits: {1: 2}
"""


@pytest.mark.parametrize(
    "events_from", [pytest.param(10**12, id="nodes"), pytest.param(0, id="events")]
)
def test_a_manifest_key_that_is_a_number_is_unusable_at_its_line(
    tmp_path, monkeypatch, events_from
):
    """Issue 41: kubectl would send ``"1"``, a resource name the API server refuses; taken
    as its text, check allowed the pod. Rule files and inventories still take it as text."""
    monkeypatch.setattr(manifests, "EVENTS_FROM_BYTES", events_from)
    path = tmp_path / "pod.yaml"
    path.write_text(POD_WITH_A_NUMBER_KEY)

    docs, errors = manifests.load_manifests([str(path)])

    assert docs == []
    assert [str(e) for e in errors] == [
        f"{path}:9: not usable: the key 1 is a number, not text: kubectl would send it as the "
        'text "1"; quote it if that is what you mean'
    ]
    (doc,), _ = parse_text(POD_WITH_A_NUMBER_KEY, "rules.yaml")
    assert doc.obj["spec"]["containers"][0]["resources"]["limits"] == {"1": 2}


@pytest.mark.parametrize(
    "key", [pytest.param("true", id="a-boolean"), pytest.param("1.5", id="a-float")]
)
def test_a_manifest_key_that_is_a_boolean_or_float_is_unusable(tmp_path, key):
    path = tmp_path / "labels.yaml"
    path.write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {{{key}: x}}\n"
    )

    docs, (error,) = manifests.load_manifests([str(path)])

    assert docs == []
    assert f"{path}:5: not usable: the key {key} is" in str(error)


def test_a_quoted_number_key_is_text_and_read(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text(POD_WITH_A_NUMBER_KEY.replace("{1: 2}", '{"1": 2}'))

    (doc,), errors = manifests.load_manifests([str(path)])

    assert errors == []
    assert doc.obj["spec"]["containers"][0]["resources"]["limits"] == {"1": 2}
