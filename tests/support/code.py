"""Reading the app's own source, for tests that hold a rule over all of it: which
comparisons and template lines name something they should not."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def comparisons(
    matches: Callable[[ast.expr], bool],
    skip: set[str],
    whole: Callable[[ast.Compare], bool] | None = None,
) -> list[str]:
    """`path:line` of every comparison in app/ with a side that `matches` (or, with
    `whole`, that `whole` finds as a whole), in modules under no folder named in `skip`."""
    found = []
    for path in (ROOT / "app").rglob("*.py"):
        if skip & set(path.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            if any(matches(side) for side in (node.left, *node.comparators)) or (
                whole is not None and whole(node)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def template_lines(pattern: str, skip: set[str] = frozenset()) -> list[str]:
    """`path:line` of every line of templates/ that `pattern` finds, in templates under
    no folder named in `skip`."""
    found = []
    for path in (ROOT / "templates").rglob("*.html"):
        if skip & set(path.parts):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(pattern, line):
                found.append(f"{path.relative_to(ROOT)}:{number}")
    return found
