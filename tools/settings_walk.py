"""The settings walk: how far ``settings`` travels from the predictions asset.

    python tools/settings_walk.py [CHECKOUT] [--list]

Every function reached from ``orchestration/assets_evaluate.py``'s ``predictions_asset`` by passing ``settings``
on (a call with the name ``settings`` among its arguments), resolved by name to the package's definitions that take
a ``settings`` parameter, is one stop; the walk prints the stops and the modules they are in. A static, name-based
measure, so the same for any commit: ``git archive <commit> kinematic_pipeline | tar -x -C DIR`` and walk ``DIR``.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path


def _definitions(package: Path) -> dict[str, list[tuple[str, ast.FunctionDef]]]:
    """{function name: [(module, definition)]} of every function or method with a ``settings`` parameter."""
    out: dict[str, list] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        module = str(path.relative_to(package.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if "settings" in [a.arg for a in node.args.args + node.args.kwonlyargs]:
                    out[node.name].append((module, node))
    return out


def _passes_settings(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Name) and a.id == "settings" for a in [*call.args, *(k.value for k in call.keywords)])


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def walk(package: Path) -> set[tuple[str, str, int]]:
    """The stops (module, function, line) of the walk from the predictions asset."""
    defs = _definitions(package)
    stack = [(m, n) for m, n in defs["predictions_asset"] if m.endswith("assets_evaluate.py")]
    seen: set[tuple[str, str, int]] = set()
    while stack:
        module, node = stack.pop()
        if (module, node.name, node.lineno) in seen:
            continue
        seen.add((module, node.name, node.lineno))
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)):
            name = _callee(call)
            if name and _passes_settings(call):
                stack.extend(defs.get(name, ()))
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", default=".", help="a folder holding kinematic_pipeline/")
    parser.add_argument("--list", action="store_true", help="print every stop")
    args = parser.parse_args()
    stops = walk(Path(args.checkout) / "kinematic_pipeline")
    if args.list:
        for stop in sorted(stops):
            print(*stop)
    print(f"stops {len(stops)}, modules {len({m for m, _, _ in stops})}")


if __name__ == "__main__":
    main()
