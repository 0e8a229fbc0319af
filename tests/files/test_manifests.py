"""Manifest files: YAML aliases are expanded only within a small budget (issue 11, item 6)."""

from __future__ import annotations

import pytest

from tests.builders import billion_laughs
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
