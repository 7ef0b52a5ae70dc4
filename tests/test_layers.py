"""Layers point one way: runtime ← crypto/privacy/data ← protocols ← deploy/experiments ← cli.

Every import of an islands module, at module level or inside a function, is read from the
source (nothing is imported) and checked against the layer order below: a module may
import its own layer and the ones beneath it, never one above, and the deployment and the
reproductions do not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "islands"

LAYERS = {
    "errors": 0, "validation": 0, "reporting": 0, "config": 0, "estimator": 0,
    "crypto": 1, "privacy": 1, "data": 1, "runtime": 1,
    "securesum": 2, "cca": 2, "pca": 2, "psi": 2, "hfl": 2, "vfl": 2, "protocols": 2,
    "deploy": 3, "experiments": 3,
    "cli": 4, "__init__": 4, "__main__": 4,
}
APART = {frozenset({"deploy", "experiments"})}


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "islands" and len(parts) > 1 else None


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
    return out


def test_every_package_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
            if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert tops <= set(LAYERS), sorted(tops - set(LAYERS))


def test_no_import_points_up() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        source = rel.parts[0].removesuffix(".py")
        for line, module in _imports(path):
            target = _top(module)
            if target is None or target == source:
                continue
            if LAYERS[target] > LAYERS[source] or frozenset({source, target}) in APART:
                wrong.append(f"{rel}:{line} ({source}) imports {module} ({target})")
    assert not wrong, "\n".join(wrong)
