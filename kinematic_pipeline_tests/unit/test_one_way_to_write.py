"""One way to write a file (issue 55, item 1): outside the warehouse package, nothing writes a final path in place.

Every file goes through ``warehouse.atomic`` (a temporary file renamed over the target: a symbolic link planted
there is replaced, never written through) or, for a lock or an appended trace, ``warehouse.no_follow``. A static
read of the source (``ast``) finds what would write in place: ``write_text(``, ``.write_bytes(``, ``open(...)`` for
writing or appending, ``torch.save``, ``savefig``, ``write_parquet`` (and Polars' other writers) or PEFT's
``save_pretrained`` on a path. Allowed: a target in memory (a name bound to ``io.BytesIO()`` / ``io.StringIO()``)
and a target under a fresh staging folder (a name bound to ``tempfile.mkdtemp(...)``, swapped in whole after)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kinematic_pipeline_tests.helpers import ROOT

PACKAGE = ROOT / "kinematic_pipeline"
ALLOWED_HOME = PACKAGE / "warehouse"  # the one place that writes (atomically, or a lock without following a link)

IN_PLACE = {"write_text", "write_bytes"}  # pathlib's: always the final path, in place
TARGET_FIRST = {  # writers whose first argument is where they write
    "save",  # torch.save(obj, path): the target is the second argument (below)
    "savefig",
    "write_parquet",
    "write_csv",
    "write_ipc",
    "write_json",
    "write_ndjson",
    "write_avro",
    "save_pretrained",
}
MEMORY = {"BytesIO", "StringIO"}


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _bound_to(tree: ast.AST, callee: set[str]) -> set[str]:
    """The names assigned (anywhere in ``tree``) an expression that calls one of ``callee``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            if any(isinstance(c, ast.Call) and _call_name(c) in callee for c in ast.walk(node.value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _root_name(node: ast.AST) -> str | None:
    """The leftmost name of a path expression: ``tmp`` for ``tmp / NAME``, ``Path(tmp) / x``, ``tmp.joinpath(x)``."""
    while True:
        if isinstance(node, ast.BinOp):
            node = node.left
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, ast.Call) and node.args:
            node = node.args[0]
        elif isinstance(node, ast.Attribute):
            node = node.value
        else:
            return node.id if isinstance(node, ast.Name) else None


def _mode(node: ast.Call) -> ast.AST | None:
    """The mode of ``open(path, mode)`` or of ``path.open(mode)``."""
    position = 1 if isinstance(node.func, ast.Name) else 0
    if len(node.args) > position:
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == "mode"), None)


def in_place_writes(source: str) -> list[tuple[int, str]]:
    """(line, what) for each write of ``source`` that could go through a final path in place."""
    tree = ast.parse(source)
    memory, staging = _bound_to(tree, MEMORY), _bound_to(tree, {"mkdtemp"})
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name in IN_PLACE and isinstance(node.func, ast.Attribute):
            found.append((node.lineno, name))
        elif name == "open" and (isinstance(node.func, ast.Name) or _root_name(node.func) != "os"):
            mode = _mode(node)
            writing = mode is not None and not (
                isinstance(mode, ast.Constant) and isinstance(mode.value, str) and not set("wax+") & set(mode.value)
            )
            target = node.args[0] if node.args and isinstance(node.func, ast.Name) else node.func
            if writing and _root_name(target) not in staging:
                found.append((node.lineno, "open for writing"))
        elif name in TARGET_FIRST and isinstance(node.func, ast.Attribute):
            if name == "save" and _root_name(node.func) != "torch":
                continue  # another object's save (ours take no path), not torch's
            position = 1 if name == "save" else 0
            target = node.args[position] if len(node.args) > position else None
            if target is None:
                keyword = {"save": "f", "savefig": "fname"}.get(name, "file")
                target = next((k.value for k in node.keywords if k.arg in (keyword, "save_directory")), None)
            if target is None:
                continue
            if any(isinstance(c, ast.Call) and _call_name(c) in MEMORY for c in ast.walk(target)):
                continue  # straight into memory
            if _root_name(target) in memory | staging:
                continue
            found.append((node.lineno, "torch.save" if name == "save" else name))
    return sorted(found)


def test_in_place_writes_are_found_in_each_shape_and_memory_and_staging_are_allowed():
    source = """
path.write_text("x")
(out / "a.md").write_bytes(b"x")
with open(path, "w") as fh: pass
with open(path, "a+") as fh: pass
with open(path, mode="wb") as fh: pass
torch.save(state, path)
fig.savefig(path, format="png")
frame.write_parquet(out / "t.parquet")
frame.write_csv(path)
model.save_pretrained(adapter_dir / "adapter")
with path.open("w") as fh: pass
buffer = io.BytesIO()
torch.save(state, buffer)
fig.savefig(buffer, format="png")
frame.write_parquet(io.BytesIO())
text = io.StringIO(newline="")
frame.write_csv(text)
tmp = Path(tempfile.mkdtemp(dir=staging))
frame.write_parquet(tmp / "rows.parquet", statistics=True)
with open(tmp / "tokens.npy", "wb") as out: pass
model.save_pretrained(tmp)
with open(path) as fh: pass
with open(path, "rb") as fh: pass
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
probe.save()
"""
    assert [line for line, _ in in_place_writes(source)] == list(range(2, 13))


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if ALLOWED_HOME not in p.parents)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_outside_the_warehouse_package_writes_a_file_in_place(path: Path):
    found = [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in in_place_writes(path.read_text())]
    assert found == [], "write through kinematic_pipeline.warehouse.atomic (write_bytes_atomic, ...)"
