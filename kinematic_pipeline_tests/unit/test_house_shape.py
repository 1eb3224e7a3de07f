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
# The layers above the library: nothing else imports them (the package's lazy ``defs`` excepted). The predictors read
# the stages' files (a probe's features) and the stages write what they predict.
UPPER = (
    "kinematic_pipeline.stages",
    "kinematic_pipeline.predictors",
    "kinematic_pipeline.orchestration",
    "kinematic_pipeline.cli",
)
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


def _import_time_edges(modules: dict[str, Path], package: str = PACKAGE.name) -> dict[str, set[str]]:
    """{module: the package modules its body runs when it is imported}: its imports outside functions and outside
    ``if TYPE_CHECKING:``, each with the package faces above it (importing ``a.b.c`` runs ``a/__init__`` and
    ``a/b/__init__`` first). A circle here fails for whoever imports one of its modules first, whatever the order."""
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        pending = list(ast.parse(path.read_text(), str(path)).body)
        while pending:
            node = pending.pop()
            if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
                continue
            if isinstance(node, (ast.If, ast.Try)):
                pending += [*node.body, *node.orelse, *getattr(node, "finalbody", []), *getattr(node, "handlers", [])]
            elif isinstance(node, ast.ExceptHandler):
                pending += node.body
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(package):
                targets = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith(package)]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                runs = {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & (set(modules) | packages)
                edges[name] |= {m for m in runs if m != name and not name.startswith(f"{m}.")}
    return edges


def test_no_circle_runs_when_a_module_is_imported():
    assert _cycles(_import_time_edges(_modules())) == []


def test_a_circle_through_a_package_face_is_found(tmp_path):
    """The circle that broke CI at 098910d: a leaf of ``tasks`` imported from below ran the face, which imported the
    task, which imported the module below back. The static edges of ``_imports`` (a leaf is not its face) miss it."""
    files = {
        "pkg/__init__.py": "",
        "pkg/tasks/__init__.py": "from pkg.tasks.task import Task\n",
        "pkg/tasks/actions.py": "BUY = 1\n",
        "pkg/tasks/task.py": "from pkg.backtest.calibration import fit\n",
        "pkg/backtest/__init__.py": "",
        "pkg/backtest/calibration.py": "from pkg.tasks.actions import BUY\ndef fit():\n    return BUY\n",
    }
    modules = {}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
        modules[rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")] = tmp_path / rel
    assert _cycles(_import_time_edges(modules, "pkg")) == [["pkg.backtest.calibration", "pkg.tasks", "pkg.tasks.task"]]


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
    from kinematic_pipeline.predictors.families import predictor
    from kinematic_pipeline.variants import ALL_VARIANTS

    for v in ALL_VARIANTS.values():
        assert not any(hasattr(v, flag) for flag in FAMILY_FLAGS), v.name
        assert {"inputs", "model_files", "data_seen", "training_record"} <= set(dir(v)), v.name
        assert {"load", "predictions", "provenance", "calibrated"} <= set(dir(predictor(v))), v.name


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


# An import inside a function is there for one of two reasons (issue 52), else it belongs at the module's top:
# - it breaks a real cycle: at the top, it would close a circle of top-level imports;
# - it defers a heavy package: its target imports one of HEAVY when it is imported (itself or through its own
#   top-level imports), and the importing module does not already import that one.
HEAVY = ("torch", "lightning", "peft", "dagster", "sklearn", "lightgbm", "arch", "matplotlib", "numba")
# The imports inside functions that do neither, left in the modules the tasks/ and tokenizations/ refactors rewrite
# (issue 52; "file: target" pairs). The list may only shrink: a hoisted import leaves it, nothing joins it.
FUNCTION_IMPORTS_LEFT = {
    "kinematic_pipeline/model_pins.py: kinematic_pipeline.run_keys",
    "kinematic_pipeline/model_pins.py: kinematic_pipeline.warehouse.layout",
    "kinematic_pipeline/model_pins.py: kinematic_pipeline.warehouse.verified",
    "kinematic_pipeline/model_pins.py: kinematic_pipeline.window_store",
    "kinematic_pipeline/stages/evidence.py: kinematic_pipeline.run_keys",
    "kinematic_pipeline/stages/evidence.py: kinematic_pipeline.stages.alpha",
    "kinematic_pipeline/stages/evidence.py: kinematic_pipeline.stages.features",
    "kinematic_pipeline/stages/evidence.py: kinematic_pipeline.variants",
    "kinematic_pipeline/stages/evidence.py: kinematic_pipeline.window_store",
    "kinematic_pipeline/stages/oracle_control.py: kinematic_pipeline.sources.synthetic",
    "kinematic_pipeline/stages/scaling_scores.py: kinematic_pipeline.backtest.policy_frames",
    "kinematic_pipeline/stages/scaling_scores.py: kinematic_pipeline.backtest.volatility_reference",
    "kinematic_pipeline/stages/scaling_scores.py: kinematic_pipeline.stages.reference_rows",
}


def _import_graph(root: Path, package: str) -> tuple[dict, dict, list[tuple[str, int, str]]]:
    """What importing each module of ``package`` (under ``root``) runs: ``top`` {module: the package modules it
    imports at its top level (a class body's imports too; not those under ``if TYPE_CHECKING:``), with their
    packages' faces, since importing ``a.b.c`` runs ``a`` and ``a.b`` first}, ``heavy`` {module: the HEAVY packages
    among its top-level imports}, and ``inner``: every package import inside a function, as (module, line, target)."""
    paths = {}
    for path in (root / package).rglob("*.py"):
        paths[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    def faces(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts))]

    top: dict[str, set[str]] = defaultdict(set)
    heavy: dict[str, set[str]] = defaultdict(set)
    inner: list[tuple[str, int, str]] = []

    def walk(name: str, node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.If)
                and getattr(child.test, "id", getattr(child.test, "attr", "")) == "TYPE_CHECKING"
            ):
                continue
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                own = child.module == package or child.module.startswith(f"{package}.")
                names = [f"{child.module}.{a.name}" for a in child.names] if own else [child.module]
            else:
                walk(name, child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
                continue
            for target in names:
                if target.split(".")[0] != package:
                    if target.split(".")[0] in HEAVY and not in_function:
                        heavy[name].add(target.split(".")[0])
                    continue
                found = resolve(target)
                if found is None or found == name or name.startswith(f"{found}."):  # itself, or its own face
                    continue
                if in_function:
                    inner.append((name, child.lineno, found))
                else:
                    top[name].update(f for f in [*faces(found), found] if f != name and not name.startswith(f"{f}."))

    for name, path in paths.items():
        top[name].update(faces(name))
        walk(name, ast.parse(path.read_text(), str(path)), False)
    return top, heavy, inner


def _function_import_offences(root: Path, package: str) -> set[str]:
    """The imports inside functions of ``package`` that neither break a cycle nor defer a heavy package, as
    "file: target" pairs."""
    top, heavy, inner = _import_graph(root, package)

    def reach(start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in top.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def heavies(name: str) -> set[str]:
        return set().union(*(heavy.get(m, set()) for m in reach(name)))

    def path_of(name: str) -> str:
        base = root.joinpath(*name.split("."))
        return str((base / "__init__.py" if base.is_dir() else base.with_suffix(".py")).relative_to(root))

    return {
        f"{path_of(name)}: {target}"
        for name, _, target in inner
        if name not in reach(target) and not heavies(target) - heavies(name)
    }


def test_an_import_inside_a_function_breaks_a_cycle_or_defers_a_heavy_package():
    assert sorted(_function_import_offences(ROOT, PACKAGE.name) - FUNCTION_IMPORTS_LEFT) == []


def test_the_list_of_function_imports_left_only_shrinks():
    hoisted = FUNCTION_IMPORTS_LEFT - _function_import_offences(ROOT, PACKAGE.name)
    assert sorted(hoisted) == []  # hoisted (or gone): take it off FUNCTION_IMPORTS_LEFT


def test_an_import_inside_a_function_that_defers_nothing_is_found(tmp_path: Path):
    files = {
        "__init__.py": "",
        "light.py": "import json\n",
        "heavy.py": "import torch\n",
        "via.py": "from pkg.heavy import X\n",  # heavy through its own top-level import
        "a.py": "from pkg.b import g\n",
        "b.py": "def g():\n    from pkg.a import h  # a imports b at its top: a cycle once hoisted\n",
        "user.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.light import T  # never runs\n"
            "def f():\n    from pkg.light import x  # defers nothing\n"
            "def g():\n    from pkg.via import y  # defers torch\n"
            "class C:\n    def m(self):\n        import pkg.light  # defers nothing, in a method\n"
        ),
        "torch_user.py": "import torch\ndef f():\n    from pkg.via import y  # torch is here already\n",
        "dagster_user.py": "import dagster\ndef f():\n    from pkg.via import y  # defers torch\n",
    }
    (tmp_path / "pkg").mkdir()
    for name, text in files.items():
        (tmp_path / "pkg" / name).write_text(text)
    assert _function_import_offences(tmp_path, "pkg") == {"pkg/user.py: pkg.light", "pkg/torch_user.py: pkg.via"}


# --- the task axis (issue 52): what the Buy/Sell/Hold task names lives in tasks/ --------------------------------------
TASK_NAMES = re.compile(r"\b(p_buy|p_sell|p_hold|tau_column)\b|class_weights")
# Modules outside tasks/ that still name the task's columns, weights or label column: the list may only shrink (a
# module that no longer names them must leave it; predictors/ holds what stages/predict.py and stages/baselines.py
# named before the predictors moved out of them). Most read the stored class-weighted q and de-weight it, which
# goes when the predictions store the task's outputs (p) with the weights in their record.
TASK_NAMES_ALLOWED = frozenset(
    """backtest/calibration.py backtest/decisions.py backtest/oracle.py backtest/policy_frames.py
    backtest/volatility_reference.py config/settings.py model_pins.py orchestration/assets_baselines.py
    orchestration/assets_models.py orchestration/metadata.py predictors/base.py predictors/features.py
    predictors/model.py
    report/evidence_tables.py run_keys.py stages/backtests.py stages/base_rates.py stages/baselines.py
    stages/evidence.py stages/labels.py stages/oracle_control.py stages/pooled.py stages/predict.py
    stages/reference_rows.py stages/report.py stages/report_titles.py stages/scaling.py stages/scaling_scores.py
    stages/training_table.py warehouse/layout.py""".split()
)
# singledispatch on a variant's class: none; a family's behaviour is a method of its predictor (predictors/).
SINGLEDISPATCH_ALLOWED: frozenset[str] = frozenset()


def _naming(pattern: re.Pattern, skip: str | None = None) -> set[str]:
    return {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if not (skip and str(path.relative_to(PACKAGE)).startswith(skip)) and pattern.search(path.read_text())
    }


def test_the_task_is_named_only_in_tasks_and_the_shrinking_list():
    found = _naming(TASK_NAMES, skip="tasks/")
    assert found - TASK_NAMES_ALLOWED == set(), "name the task's columns and weights through tasks/, not here"
    assert TASK_NAMES_ALLOWED - found == set(), "these no longer name them: take them off TASK_NAMES_ALLOWED"


def test_a_task_name_outside_tasks_is_found():
    assert TASK_NAMES.search('q = frame["p_buy"]') and TASK_NAMES.search("w = settings.train.class_weights")
    assert TASK_NAMES.search("tau_column(0.01)") and not TASK_NAMES.search("p_buyer = 1; tau = 0.01")


def test_no_new_singledispatch_on_a_variant():
    found = _naming(re.compile(r"singledispatch"))
    assert found <= SINGLEDISPATCH_ALLOWED and found == SINGLEDISPATCH_ALLOWED, found
