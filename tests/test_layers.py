"""Layers point one way: base ← runtime/crypto/privacy/data ← aggregation ← protocols
← deploy/experiments ← cli.

Every import of an islands module, at module level or inside a function, is read from the
source (nothing is imported) and checked against the layer order below: a module may
import its own layer and the ones beneath it, never one above, and the deployment and the
reproductions do not import each other. Runtime, crypto, privacy and data sit side by
side: one imports another only along an edge declared in SIBLINGS.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "islands"

LAYERS = {
    "errors": 0, "validation": 0, "reporting": 0, "config": 0, "estimator": 0, "arrays": 0,
    "run_report": 0, "tracking": 0, "progress": 0, "cores": 0, "threads": 0,
    "crypto": 1, "privacy": 1, "data": 1, "runtime": 1,
    "aggregation": 1.5,  # aggregators and protections: any protocol may use them
    "securesum": 2, "cca": 2, "pca": 2, "psi": 2, "hfl": 2, "vfl": 2, "protocols": 2,
    "deploy": 3, "experiments": 3, "runs": 3,
    "cli": 4, "__init__": 4, "__main__": 4,
}
APART = {frozenset({"deploy", "experiments"})}

# Layer 1's packages import one another only along these edges (importer, imported), each
# with its reason; any other import between two of them, either way, fails the test below,
# and an edge no longer found fails the one after it.
SIBLINGS = {
    ("privacy", "crypto"): "DP noise is drawn from crypto.prg's CSPRNG",
}
SIDE_BY_SIDE = {name for name, layer in LAYERS.items() if layer == 1}


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


def _allowed(source: str, target: str) -> bool:
    """May a module of top-level package ``source`` import one of ``target``?"""
    if source == target:
        return True
    if LAYERS[target] > LAYERS[source] or frozenset({source, target}) in APART:
        return False
    return not {source, target} <= SIDE_BY_SIDE or (source, target) in SIBLINGS


def _package_imports() -> set[tuple[str, str, str]]:
    """(file, importing package, imported package) of every islands import under SRC."""
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        source = rel.parts[0].removesuffix(".py")
        for line, module in _imports(path):
            target = _top(module)
            if target is not None:
                found.add((f"{rel}:{line} imports {module}", source, target))
    return found


def test_no_import_points_up() -> None:
    wrong = sorted(f"{where} ({source} -> {target})"
                   for where, source, target in _package_imports()
                   if not _allowed(source, target))
    assert not wrong, "\n".join(wrong)


def test_sibling_edges_are_all_used() -> None:
    used = {(source, target) for _, source, target in _package_imports()}
    stale = sorted(set(SIBLINGS) - used)
    assert not stale, f"no module imports along these edges: remove them from SIBLINGS: {stale}"


def test_the_check_holds_every_pair() -> None:
    assert _allowed("crypto", "errors") and _allowed("crypto", "progress")
    assert _allowed("privacy", "crypto") and _allowed("hfl", "psi")
    assert not _allowed("crypto", "privacy") and not _allowed("crypto", "runtime")
    assert not _allowed("runtime", "data") and not _allowed("data", "runtime")
    assert not _allowed("progress", "runtime") and not _allowed("runtime", "aggregation")
    assert not _allowed("deploy", "experiments") and not _allowed("experiments", "deploy")


# --------------------------------------------------------------- function-level imports
# An islands module imported inside a function hides a dependency from the reader and from
# this file's layer check, so each one is at module top unless the module loads an optional
# heavy dependency at import (see `import islands` stays light, tests/test_package.py).
HEAVY = {
    "islands.hfl.torch": ("torch",),  # the package and every module in it
    "islands.hfl.audit": ("torch",),  # ModelSpec checks its argument at run time
    "islands.crypto.paillier": ("phe", "gmpy2"),
    "islands.crypto.paillier_ops": ("phe", "gmpy2"),
    "islands.crypto.heu": ("heu", "gmpy2"),  # heu only where sf-heu is installed
    "islands.vfl": ("phe", "gmpy2"),  # its __init__ loads the Paillier layer
}

# Function-level imports of light islands modules allowed, as (file, imported module):
# none. A new one fails the test below; an entry no longer found fails the one after it.
ALLOWED_INNER: set[tuple[str, str]] = set()


def _deferred(file: str, module: str) -> bool:
    """A command imports the protocol, deployment or reproduction it runs when it runs.

    ``islands --help`` loads no protocol package
    (tests/test_package.py::test_cli_loads_no_protocol_package); lower layers it imports
    at module top like any other module.
    """
    target = _top(module)
    return file.split("/")[0] in ("cli", "cli.py") and target is not None \
        and LAYERS.get(target, 0) >= LAYERS["securesum"]


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _module_name(path: Path) -> str:
    parts = ("islands", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _targets(node: ast.AST, *, parents: bool = True) -> list[str]:
    """The modules an import statement loads (``from a import b``: a, and a.b if a module).

    Without ``parents``, ``from a import b`` of a module b names only a.b.
    """
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        subs = [f"{node.module}.{alias.name}" for alias in node.names]
        found = [s for s in subs if s.startswith("islands.") and _is_module(s)]
        return [node.module, *found] if parents or len(found) < len(subs) else found
    return []


def _function_imports(path: Path) -> list[tuple[int, str]]:
    """Islands modules imported in the body of a function of ``path``."""
    out: dict[tuple[int, str], None] = {}
    for func in ast.walk(_tree(path)):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                for name in _targets(node, parents=False):
                    if name.split(".")[0] == "islands":
                        out[(node.lineno, name)] = None
    return list(out)


def _module_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported (not in functions or TYPE_CHECKING)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        found.update(_targets(node))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(_tree(path))
    return found


def _heavy(name: str) -> tuple[str, ...]:
    """The optional dependencies ``name`` loads at import (empty if it is light)."""
    return next((deps for h, deps in HEAVY.items()
                 if name == h or name.startswith(h + ".")), ())


def _loads(module: str, graph: dict[str, set[str]]) -> set[str]:
    """Top-level packages loaded by importing ``module`` (its packages' __init__ first)."""
    parts = module.split(".")
    todo = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return {name.split(".")[0] for name in seen}


@functools.cache
def _import_graph() -> dict[str, set[str]]:
    return {_module_name(p): _module_level_imports(p) for p in SRC.rglob("*.py")}


@functools.cache
def _light_function_imports() -> frozenset[tuple[str, str]]:
    """(file, module) of each function-level import that defers no optional dependency.

    A heavy module counts as light where the importing module already loads what it loads.
    """
    graph = _import_graph()
    found: set[tuple[str, str]] = set()
    for path in sorted(SRC.rglob("*.py")):
        already = _loads(_module_name(path), graph)
        file = path.relative_to(SRC).as_posix()
        for _, name in _function_imports(path):
            if not set(_heavy(name)) - already and not _deferred(file, name):
                found.add((file, name))
    return frozenset(found)


def test_no_function_level_import_of_a_light_module() -> None:
    new = sorted(_light_function_imports() - ALLOWED_INNER)
    assert not new, ("import these at module top (or add the module to HEAVY, with the "
                     f"optional dependency it loads at import): {new}")


def test_function_level_allowlist_only_shrinks() -> None:
    stale = sorted(ALLOWED_INNER - _light_function_imports())
    assert not stale, f"these imports moved up: remove them from ALLOWED_INNER: {stale}"


def test_heavy_modules_load_their_dependency_at_import() -> None:
    graph = _import_graph()
    wrong = {module: deps for module, deps in HEAVY.items()
             if not set(deps) <= _loads(module, graph)}
    assert not wrong, f"not heavy at import, import them at module top: {wrong}"


def test_the_check_sees_a_function_level_import(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text("import numpy\n\n\ndef f():\n    from islands.errors import JobError\n"
                      "    import islands.hfl.torch.models\n    return JobError\n",
                      encoding="utf-8")
    found = _function_imports(source)
    assert found == [(5, "islands.errors"), (6, "islands.hfl.torch.models")]
    assert not _heavy("islands.errors") and _heavy("islands.hfl.torch.models") == ("torch",)
    graph = _import_graph()
    assert "torch" in _loads("islands.hfl.torch.learner", graph)
    assert "torch" not in _loads("islands.hfl", graph)


# --------------------------------------------------------------- torch is a folder
# Torch is loaded by the modules of islands/hfl/torch/ and by nothing else at import; a
# module elsewhere that needs one of them at import is heavy itself (HEAVY says so).
TORCH_PACKAGE = "islands.hfl.torch"
TORCH_DEPENDENCIES = {"torch", "opacus"}


def _inside_torch_package(module: str) -> bool:
    return module == TORCH_PACKAGE or module.startswith(TORCH_PACKAGE + ".")


def _torch_outside_its_folder(graph: dict[str, set[str]]) -> list[str]:
    """Modules outside the torch package that import torch, or it, at module level."""
    wrong = []
    for module, imported in sorted(graph.items()):
        if _inside_torch_package(module):
            continue
        direct = sorted(n for n in imported if n.split(".")[0] in TORCH_DEPENDENCIES)
        if direct:
            wrong.append(f"{module} imports {direct} at module level")
        through = sorted(n for n in imported if _inside_torch_package(n))
        if through and "torch" not in _heavy(module):
            wrong.append(f"{module} imports {through} at module level but is not in HEAVY")
    return wrong


def test_only_the_torch_folder_imports_torch_at_module_level() -> None:
    wrong = _torch_outside_its_folder(_import_graph())
    assert not wrong, "\n".join(wrong)
    assert not {"torch", "opacus"} & _loads("islands.hfl", _import_graph())
    assert not {"torch", "opacus"} & _loads("islands.aggregation", _import_graph())


def test_the_torch_folder_check_sees_a_stray_import() -> None:
    graph = {"islands.hfl.torch.models": {"torch", "torch.nn"},
             "islands.hfl.strategy": {"torch.nn"},
             "islands.hfl.protocol": {"islands.hfl.torch.learner"},
             "islands.hfl.audit": {"islands.hfl.torch.learner"}}
    assert _torch_outside_its_folder(graph) == [
        "islands.hfl.protocol imports ['islands.hfl.torch.learner'] at module level but is "
        "not in HEAVY",
        "islands.hfl.strategy imports ['torch.nn'] at module level"]
