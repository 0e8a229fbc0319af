"""The package layout stays navigable: no module imports one that imports it back (a
circle, even through a function-level import, means the two are one module in disguise),
and no package folder holds more modules than a reader takes in at once."""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = grimp.build_graph("webhook")
    circles = sorted(
        {
            tuple(sorted((module, imported)))
            for module in graph.modules
            for imported in graph.find_modules_directly_imported_by(module)
            if imported != module and graph.chain_exists(importer=imported, imported=module)
        }
    )
    assert circles == []


MAX_MODULES = 12


def test_no_package_folder_holds_more_than_twelve_modules() -> None:
    """A folder of more is one nobody reads whole: split it by what its modules hold."""
    crowded = {
        str(folder.relative_to(ROOT)): count
        for folder in [ROOT / "webhook", *(ROOT / "webhook").rglob("*/")]
        if folder.is_dir() and "__pycache__" not in folder.parts
        for count in [len([p for p in folder.glob("*.py") if p.name != "__init__.py"])]
        if count > MAX_MODULES
    }
    assert crowded == {}
