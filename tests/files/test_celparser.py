"""celpy's parser through lark's cache: the same trees as celpy's own parser, a cache file
that is written once and read after, and celpy's own parser wherever no cache can be had."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from celpy.celparser import CELParser
from lark import Tree

from webhook.files import celparser

ROOT = Path(__file__).resolve().parents[2]
EXPRESSIONS = [
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "[1, 2, 3].all(x, x > 0) ? true : false",
    "{'a': 1}.a in [1u, 2.5, -3] || has(device.attributes.x)",
    "'''triple''' + r'raw' + \"dq\" != b'bytes'",
]


@pytest.fixture
def fresh_parser():
    """celpy's singleton parser put back as it was around each test."""
    kept = CELParser.CEL_PARSER
    CELParser.CEL_PARSER = None
    yield
    CELParser.CEL_PARSER = kept


def _celpy_trees() -> list[Tree]:
    CELParser.CEL_PARSER = None
    return [CELParser().parse(e) for e in EXPRESSIONS]


def test_the_cached_parser_makes_the_trees_celpys_own_makes(fresh_parser, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    own = _celpy_trees()
    CELParser.CEL_PARSER = None
    celparser.load_cached_parser()
    assert CELParser.CEL_PARSER is not None
    cached_once = [CELParser().parse(e) for e in EXPRESSIONS]
    (cache,) = (tmp_path / "gpu-webhook").iterdir()
    assert cache.stat().st_size > 0
    CELParser.CEL_PARSER = None
    celparser.load_cached_parser()  # now read from the file
    # Loaded tables name rules with plain strings where a fresh build uses tokens; lark's
    # trees compare equal either way, and celpy reads them by name.
    assert [CELParser().parse(e) for e in EXPRESSIONS] == cached_once == own


def test_a_damaged_cache_is_rebuilt(fresh_parser, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = celparser.cache_file()
    assert path is not None
    path.write_bytes(b"not a lark cache\n")
    celparser.load_cached_parser()
    assert CELParser.CEL_PARSER is not None
    assert CELParser().parse(EXPRESSIONS[0]) == _celpy_trees()[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only modes")
def test_an_unwritable_cache_directory_means_no_cache(fresh_parser, tmp_path, monkeypatch):
    (tmp_path / "gpu-webhook").mkdir(mode=0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert celparser.cache_file() is None
    celparser.load_cached_parser()
    assert CELParser.CEL_PARSER is None  # celpy builds its own, as before


def test_a_cache_directory_that_cannot_be_made_means_no_cache(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    assert celparser.cache_file() is None


def test_importing_the_selectors_imports_no_cel_library():
    # Issue 36: celpy and lark only when a selector is first compiled.
    code = (
        "import sys, webhook.files, webhook.engine.resources.cel.deviceselectors;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('celpy', 'lark')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
