"""The shipped tables read as their files say, whichever YAML parser PyYAML has."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.builders import ROOT
from webhook.files.inventoryfile import COMPACT_FROM, inventory_from_bytes
from webhook.files.shipped import cuda_table

CUDA_FILE = ROOT / "webhook" / "data" / "cuda-images.yaml"


def test_the_cuda_table_is_what_the_pure_python_parser_reads() -> None:
    assert cuda_table() == yaml.load(CUDA_FILE.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)


def test_a_small_inventory_file_is_the_same_inventory_whether_or_not_it_is_compacted(
    tmp_path: Path,
) -> None:
    data = (ROOT / "examples" / "inventory.yaml").read_bytes()
    padded = data + b"\n" + b"#" * COMPACT_FROM + b"\n"
    small = inventory_from_bytes(data, str(tmp_path / "small.yaml"))
    compacted = inventory_from_bytes(padded, str(tmp_path / "padded.yaml"))
    assert len(data) < COMPACT_FROM <= len(padded)
    assert small.nodes.nodes == compacted.nodes.nodes
    assert small.nodes.shapes == compacted.nodes.shapes
    assert (small.devices, small.runtime_classes, small.pools, small.quotas) == (
        compacted.devices,
        compacted.runtime_classes,
        compacted.pools,
        compacted.quotas,
    )


def test_the_data_directory_read_from_disk_is_the_package_data() -> None:
    from importlib import resources

    from webhook.files.shipped import CUDA_TABLE, DATA, KUBE_SCHEMAS, _text

    for name in (CUDA_TABLE, KUBE_SCHEMAS):
        assert (DATA / name).is_file()
        assert _text(name) == resources.files("webhook").joinpath("data", name).read_text("utf-8")
