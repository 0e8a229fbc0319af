"""The package layout stays navigable: no module imports one that imports it back (a
circle, even through a function-level import, means the two are one module in disguise)."""

from __future__ import annotations

import grimp


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
