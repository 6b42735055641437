"""The layering rule of DESIGN.md: app/learn is a pure library."""

import ast
import subprocess
import sys
from pathlib import Path

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
    return names


def test_learn_sources_import_no_web_or_database_package():
    offenders = {
        f"{path.relative_to(LEARN.parent.parent)}: {name}"
        for path in LEARN.rglob("*.py")
        for name in _imported_modules(path)
        if name.split(".")[0] in FORBIDDEN or name.startswith(FORBIDDEN)
    }
    assert not offenders, offenders


def test_importing_learn_loads_no_web_or_database_package():
    probe = (
        "import sys, app.learn; "
        "print(','.join(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi','sqlalchemy','starlette','alembic','pydantic','psycopg')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=LEARN.parent.parent,
    ).stdout.strip()
    assert loaded == ""
