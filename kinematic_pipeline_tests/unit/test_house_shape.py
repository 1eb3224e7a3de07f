"""The shape of the package (issue 31): no import cycle, no import running back up from below the stages, no
branch on a variant's family outside the registry, no asset name spelled outside its object (issue 52), no module
past the size limit, a README that is a door.

Static reads of the source (``ast``), so each failure names the file and the import or line at fault."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from kinematic_pipeline_tests.helpers import ROOT

PACKAGE = ROOT / "kinematic_pipeline"
MAX_LINES = 420  # the "no module over ~420 lines"
README_LINES = 150
# The layers above the library: nothing else imports them (the package's lazy ``defs`` excepted).
UPPER = ("kinematic_pipeline.stages", "kinematic_pipeline.orchestration", "kinematic_pipeline.cli")
LAZY_DEFS = ("kinematic_pipeline", "kinematic_pipeline.definitions")  # Dagster loads ``kinematic_pipeline:defs``


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the package modules it imports, at any depth of its body (imports inside functions too; not those
    under ``if TYPE_CHECKING:``, which never run)}."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        type_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
            for n in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE.name):
                targets = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith(PACKAGE.name)]
            else:
                continue
            for target in targets:
                found = resolve(target)
                if found and found != name and not name.startswith(f"{found}."):  # a package's own face
                    edges[name].add(found)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle():
    assert _cycles(_imports(_modules())) == []


def test_a_cycle_is_found_when_there_is_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_below_the_stages_imports_them():
    upward = [
        f"{name} imports {target}"
        for name, targets in _imports(_modules()).items()
        if not name.startswith(UPPER) and name not in LAZY_DEFS and name != "kinematic_pipeline.__main__"
        for target in targets
        if target.startswith(UPPER)
    ]
    assert upward == []


FAMILY_FLAGS = ("fine_tuned", "fitted", "learns")  # what the flag branches asked before each family answered


def _family_branches(source: str) -> list[int]:
    """The lines of ``source`` that branch on a variant's family: its name compared, its class tested
    (``isinstance(..., ModelVariant)``), or a family flag read off a variant (``spec.fine_tuned``, ``.learns``;
    ``.fitted`` off anything but a calibration, whose own ``fitted`` says whether it converged)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and getattr(node.left, "attr", None) == "family":
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            names = ast.walk(node.args[1]) if len(node.args) == 2 else ()
            if any(getattr(n, "id", "").endswith("Variant") for n in names):
                lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in FAMILY_FLAGS:
            owner = getattr(node.value, "id", getattr(node.value, "attr", ""))
            if not (node.attr == "fitted" and owner in ("self", "cal", "calibration")):
                lines.append(node.lineno)
    return sorted(lines)


def test_a_variant_family_is_branched_on_only_in_the_registry():
    branches = [
        f"{path.relative_to(ROOT)}:{k}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "variants.py"
        for k in _family_branches(path.read_text())
    ]
    assert branches == []


def test_a_family_branch_is_found_when_there_is_one():
    source = "a = spec.family == 'model'\nb = isinstance(v, ModelVariant)\nc = spec.fine_tuned\nd = p.variant.learns\n"
    assert _family_branches(source + "e = spec.fitted\nf = self.fitted\ng = spec.family\n") == [1, 2, 3, 4, 5]


def test_the_families_answer_what_their_flags_asked():
    from kinematic_pipeline.variants import ALL_VARIANTS

    for v in ALL_VARIANTS.values():
        assert not any(hasattr(v, flag) for flag in FAMILY_FLAGS), v.name
        assert {"inputs", "model_files", "data_seen", "training_record", "calibrated"} <= set(dir(v)), v.name


# An asset's name is made by its object: a tokenization's in ``tokenizations/``, a variant's in ``variants.py``.
ASSET_NAME_FSTRING = re.compile(
    r'f"\{[a-z_.]+\}_(adapter|foundation|predictions|probe|backtests|features|corpus_stats|window_store|tokens|backtesting)"'
)
NAME_HOMES = ("tokenizations", "variants.py")


def _asset_name_fstrings(source: str) -> list[int]:
    """The lines of ``source`` that spell an asset's name as an f-string (``f"{variant}_adapter"``)."""
    return [k for k, line in enumerate(source.splitlines(), 1) if ASSET_NAME_FSTRING.search(line)]


def test_an_asset_name_is_spelled_only_by_its_object():
    spelled = [
        f"{path.relative_to(ROOT)}:{k}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(part in NAME_HOMES for part in path.relative_to(PACKAGE).parts)
        for k in _asset_name_fstrings(path.read_text())
    ]
    assert spelled == []


def test_an_asset_name_fstring_is_found_when_there_is_one():
    source = 'a = f"{variant}_adapter"\nb = f"{tok.name}_corpus_stats"\nc = f"{name}_{kind}"\nd = "spline_tokens"\n'
    assert _asset_name_fstrings(source + 'e = rematerialize(f"{policy.variant.name}_probe", key)\n') == [1, 2, 5]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_past_the_size_limit(path: Path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_the_readme_is_a_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES
    assert any("make test" in line for line in lines)  # the test command .ci/run calls
