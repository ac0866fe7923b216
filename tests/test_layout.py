"""The package layout: imports go one way, down the pipeline (core → analysis → measure → warehouse
→ learn → the Dagster layer → orchestration), and each layer imports on its own."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Lower rank = lower layer; a module may import only from its own rank or below.
RANKS = {
    "hase_dagster.core": 0,
    "hase_dagster.analysis": 1,
    "hase_dagster.measure": 2,
    "warehouse": 3,
    "hase_dagster.learn": 4,
    "resources": 5,
    "assets": 6,
    "sensors": 7,
    "hase_dagster.definitions": 8,
    "hase_dagster.orchestration": 9,
}
LAYERS = sorted(RANKS, key=RANKS.get)


def _layer_of(module: str) -> str | None:
    matches = [layer for layer in RANKS if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at module level or inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def _sources() -> list[Path]:
    roots = ["hase_dagster", "assets", "resources", "sensors", "warehouse"]
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py"))


def upward_imports() -> list[str]:
    """``importer -> imported`` for every import that reaches a higher layer."""
    bad = []
    for path in _sources():
        importer = _module_name(path)
        own = _layer_of(importer)
        if own is None:
            continue
        for imported in _imports(path):
            target = _layer_of(imported)
            if target is not None and RANKS[target] > RANKS[own]:
                bad.append(f"{importer} -> {imported}")
    return bad


def test_every_module_belongs_to_a_layer() -> None:
    assert [str(p) for p in _sources() if _layer_of(_module_name(p)) is None and p.name != "__init__.py"] == []


def test_imports_only_go_down_the_pipeline() -> None:
    assert upward_imports() == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from hase_dagster.learn.predict import predict_model\n")
    assert "hase_dagster.learn.predict" in _imports(module)
    assert RANKS[_layer_of("hase_dagster.learn.predict")] > RANKS[_layer_of("hase_dagster.core.config")]


@pytest.mark.parametrize(
    "layer", [layer for layer in LAYERS if layer.startswith("hase_dagster.") and "definitions" not in layer]
)
def test_each_subpackage_imports_alone(layer: str) -> None:
    # A fresh interpreter, so a cycle cannot hide behind modules another test already imported.
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import {layer}; import pkgutil, importlib; "
            f"[importlib.import_module(m.name) for m in pkgutil.iter_modules({layer}.__path__, '{layer}.')]",
        ],
        check=True,
        cwd=REPO,
    )


def test_layers_are_packages() -> None:
    for layer in LAYERS:
        assert importlib.util.find_spec(layer) is not None
