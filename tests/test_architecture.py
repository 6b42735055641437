"""The layering rule of DESIGN.md: app/learn is a pure library."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

LEARN = Path(__file__).resolve().parent.parent / "app" / "learn"
FORBIDDEN = (
    "fastapi",
    "sqlalchemy",
    "starlette",
    "alembic",
    "pydantic",
    "app.core",
    "app.models",
    "jinja2",
    "psycopg",
)


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            # `from app.learn import tete` may import the module app.learn.tete
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_learn_sources_import_no_web_or_database_package():
    offenders = {
        f"{path.relative_to(LEARN.parent.parent)}: {name}"
        for path in LEARN.rglob("*.py")
        for name in _imported_modules(path)
        if name.split(".")[0] in FORBIDDEN or name.startswith(FORBIDDEN)
    }
    assert not offenders, offenders


def _top_packages_loaded(module: str, packages: set[str]) -> set[str]:
    """Which of `packages` a fresh interpreter has loaded once it imported `module`."""
    probe = (
        f"import sys, {module}; "
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & {packages!r})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=LEARN.parent.parent,
    ).stdout.strip()
    return set(loaded.split(",")) - {""}


@pytest.mark.slow  # a fresh interpreter
def test_importing_learn_loads_no_web_or_database_package():
    web_and_database = {"fastapi", "sqlalchemy", "starlette", "alembic", "pydantic", "psycopg"}
    assert _top_packages_loaded("app.learn", web_and_database) == set()


@pytest.mark.slow  # a fresh interpreter
def test_a_web_process_starts_without_the_learners_heavy_packages():
    """scikit-learn, SciPy and numba load when a fit, a build or a served model first
    needs them, pyarrow when a Parquet export does: a web process that (re)starts to take
    answers does not wait for them."""
    heavy = {"sklearn", "scipy", "numba", "pyarrow"}
    assert _top_packages_loaded("app.main", heavy) == set()


APP = LEARN.parent
# Where requests come in and the process is put together: they may import any service.
ROUTE_MODULES = {"api.py", "views.py"}


def _package_imports() -> dict[str, dict[str, set[str]]]:
    """For each package of app/, the other packages its modules import (function-local
    imports included), with the modules that do; route modules left out."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP).parts
        if len(parts) < 2 or path.name in ROUTE_MODULES:
            continue
        package = parts[0]
        for name in _imported_modules(path):
            if name.startswith("app.") and name.split(".")[1] != package:
                target = name.split(".")[1]
                graph.setdefault(package, {}).setdefault(target, set()).add(
                    str(path.relative_to(APP.parent))
                )
    return graph


def _in_cycles(graph) -> list[str]:
    """The nodes of `graph` (node -> the nodes it imports) that import themselves, through
    any chain of others."""
    knotted = []
    for node, targets in graph.items():
        seen, stack = set(), list(targets)
        while stack:
            current = stack.pop()
            if current == node:
                knotted.append(node)
                break
            if current not in seen:
                seen.add(current)
                stack.extend(graph.get(current, ()))
    return knotted


def test_the_service_layer_is_acyclic_at_package_level():
    """Services import only downward: two packages that import each other (even through
    a function-local import) knot every change in one into the other."""
    graph = _package_imports()
    knots = _in_cycles(graph)
    assert not knots, {
        package: {target: sorted(files) for target, files in graph[package].items()}
        for package in knots
    }


def test_the_learning_library_imports_without_cycles():
    """Each module of app/learn imports only modules below it (function-local imports
    included; the package's lazy __init__ aside): t-ETE's choice at scale once imported
    the estimator that imports it."""
    graph = {}
    for path in LEARN.glob("*.py"):
        if path.name == "__init__.py":
            continue
        imported = set()
        for name in _imported_modules(path):
            if name.startswith("app.learn."):
                imported.add(name.split(".")[2])
        graph[path.stem] = imported - {path.stem}
    cycles = _in_cycles(graph)
    assert not cycles, {module: sorted(graph[module]) for module in cycles}


def test_core_imports_no_domain():
    """app/core is the ground floor: settings, database, errors, security plumbing."""
    graph = _package_imports()
    assert graph.get("core", {}) == {}, graph.get("core")


# Modules where one algorithm needs the room, and why (every other module of app/ stays
# under MOST_LINES: a longer one holds two ideas).
MOST_LINES = 600
ONE_ALGORITHM = {
    "app/learn/comprf.py": "CompRF: the forest, its resumable builder and its routing share one state",
    "app/learn/samplers.py": "the adaptive samplers share their uncertainty and rarity measures",
}


def test_no_module_holds_two_ideas():
    long = {
        str(path.relative_to(APP.parent)): len(path.read_text().splitlines())
        for path in APP.rglob("*.py")
    }
    too_long = {
        name: lines
        for name, lines in long.items()
        if lines > MOST_LINES and name not in ONE_ALGORITHM
    }
    assert not too_long, too_long


def test_no_two_classes_share_a_name():
    """One name per concept: a reader (and the API's schema names) never has to ask which
    of two classes a name means."""
    defined: dict[str, list[str]] = {}
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(str(path.relative_to(APP.parent)))
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}
