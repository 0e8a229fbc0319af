import copy

import jsonpatch
import pytest

from webhook.engine.kube.patch import Editor, pointer


def test_pointers_escape_tilde_before_slash() -> None:
    path = ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu")
    assert pointer(path) == "/spec/containers/0/resources/limits/nvidia.com~1gpu"
    assert pointer(("metadata", "annotations", "a~b/c")) == "/metadata/annotations/a~0b~1c"


@pytest.mark.parametrize(
    ("original", "path", "value"),
    [
        pytest.param({}, ("spec", "a", "b"), 1, id="missing-parents"),
        pytest.param({"spec": {"a": None}}, ("spec", "a", "b"), 1, id="null-parent"),
        pytest.param({"spec": {"l": {"x/y~z": 1}}}, ("spec", "l", "k/~"), 2, id="escaped-key"),
    ],
)
def test_added_values_create_their_parents_and_the_patch_replays(
    original: dict[str, object], path: tuple[str, ...], value: object
) -> None:
    before = copy.deepcopy(original)
    editor = Editor(original)
    editor.add(path, value)
    assert original == before, "the original is never modified"
    assert jsonpatch.apply_patch(copy.deepcopy(original), editor.ops) == editor.doc


def test_appending_to_a_missing_or_null_list_creates_it() -> None:
    original = {"spec": {"containers": [{"name": "a", "env": None}, {"name": "b"}]}}
    editor = Editor(original)
    editor.append(("spec", "containers", 0, "env"), {"name": "X", "value": "1"})
    editor.append(("spec", "containers", 0, "env"), {"name": "Y", "value": "2"})
    editor.append(("spec", "containers", 1, "env"), {"name": "Z", "value": "3"})
    assert editor.doc["spec"]["containers"][0]["env"] == [
        {"name": "X", "value": "1"},
        {"name": "Y", "value": "2"},
    ]
    assert jsonpatch.apply_patch(copy.deepcopy(original), editor.ops) == editor.doc


def test_untouched_subtrees_are_shared_not_copied() -> None:
    original = {"spec": {"containers": [{"name": "a"}], "volumes": [{"name": "v"}]}}
    editor = Editor(original)
    editor.add(("spec", "containers", 0, "image"), "x")
    assert editor.doc["spec"]["volumes"] is original["spec"]["volumes"]
    assert editor.doc["spec"]["containers"] is not original["spec"]["containers"]


def test_recorded_values_do_not_change_when_later_edits_touch_them() -> None:
    editor = Editor({"spec": {}})
    editor.add(("spec", "tolerations"), [{"key": "a"}])
    editor.append(("spec", "tolerations"), {"key": "b"})
    assert editor.ops[0]["value"] == [{"key": "a"}]
    assert jsonpatch.apply_patch({"spec": {}}, editor.ops) == editor.doc
