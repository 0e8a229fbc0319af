"""A static inventory file broken on disk: a new worker serves the last good copy."""

from __future__ import annotations

import pytest

from tests.builders import INVENTORY
from webhook.admission.inventory import StaticInventorySource
from webhook.files.inventoryfile import InventoryFileError
from webhook.files.lastgood import LastGood


def test_a_source_started_on_a_broken_file_serves_the_last_good_copy(tmp_path, caplog):
    path = tmp_path / "nodes.yaml"
    path.write_bytes(INVENTORY.read_bytes())
    kept = LastGood(tmp_path / "last-good")
    good = StaticInventorySource(str(path), last_good=kept).snapshot()
    path.write_bytes(b"\x00\xff garbage")

    replacement = StaticInventorySource(str(path), last_good=kept)

    assert [n.name for n in replacement.snapshot().nodes] == [n.name for n in good.nodes]
    assert "serving the last good copy" in caplog.text


def test_without_a_good_copy_a_broken_file_is_still_an_error(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_bytes(b"\x00\xff garbage")

    with pytest.raises(InventoryFileError):
        StaticInventorySource(str(path), last_good=LastGood(tmp_path / "last-good"))


def test_a_node_of_the_wrong_shape_is_an_inventory_error(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text("kind: Node\napiVersion: v1\nmetadata: {name: n}\nspec: 3\n")

    with pytest.raises(InventoryFileError, match=r"nodes\.yaml"):
        StaticInventorySource(str(path))
