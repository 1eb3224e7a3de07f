"""A warehouse that repairs itself: a damaged file is moved aside with what belongs to it (so the next
materialization rewrites the day), and a catalog that cannot be opened is rebuilt from the folders, since it
holds only views. Used by ``catalog.py`` when DuckDB cannot read a file or open the catalog."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kinematic_pipeline.catalog import DAMAGED_DIR, create_view, sql_str
from kinematic_pipeline.warehouse import DAY_UNITS, REPORTS_DIR, SCHEMA_DIR, is_day_name


def quarantine_damaged(root: Path, path: Path, why: str) -> str:
    """Move a damaged file aside to ``_damaged/`` with what belongs to it: a day unit's whole folder (the day
    is then missing and the next ingest writes it again), a day shard with its manifest (likewise), any other
    file alone (its asset must be re-materialized). Returns a line saying what moved and what to do; prints it."""
    root, path = Path(root).resolve(), Path(path).resolve()
    rel = path.relative_to(root)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = root / DAMAGED_DIR / stamp
    asset = rel.parts[0]
    if asset in DAY_UNITS and len(rel.parts) == 3 and is_day_name(rel.parts[1]):
        moving = [path.parent]
        fix = f"the day {rel.parts[1]} is rewritten by the next materialization of {asset}"
    elif len(rel.parts) == 2 and is_day_name(path.stem):
        manifest = root / "manifests" / asset / path.name
        moving = [path, *([manifest] if manifest.exists() else [])]
        fix = f"the day {path.stem} is rewritten by the next materialization of {asset}"
    else:
        moving = [path]
        fix = f"re-materialize {asset}"
    for item in moving:
        dest = target / item.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        item.rename(dest)
    line = f"damaged {rel} ({why}): moved to {DAMAGED_DIR}/{stamp}/; {fix}"
    print(f"warehouse {root}: {line}", file=sys.stderr)
    return line


FLAT_SKIP = {REPORTS_DIR, "models", "window_store", "features", "manifests", "drop", DAMAGED_DIR}


def rebuild_views(root: Path, con) -> list[str]:
    """Every catalog view, re-created from the folders of the warehouse (the catalog holds only views): the
    members of each day unit with a typed ``_schema`` file, each folder of ``*.parquet`` shards, each folder of
    manifests. Returns the views' names."""
    root, views = Path(root), []
    for asset, members in DAY_UNITS.items():
        for member, name in members.items():
            if (root / asset / SCHEMA_DIR / name).exists():
                view = f"{asset}_manifest" if member == "manifest" else member
                create_view(
                    con, root, view, f"SELECT * FROM read_parquet({sql_str(f'{asset}/*/{name}')}, union_by_name = true)"
                )
                views.append(view)
    folders = [(p.name, p) for p in sorted(root.iterdir()) if p.is_dir() and p.name not in FLAT_SKIP]
    folders += [(f"{p.name}_manifest", p) for p in sorted((root / "manifests").glob("*")) if p.is_dir()]
    for view, folder in folders:
        if folder.name in DAY_UNITS or folder.name.startswith((".", "_")) or not any(folder.glob("*.parquet")):
            continue
        glob = str((folder / "*.parquet").relative_to(root))
        create_view(con, root, view, f"SELECT * FROM read_parquet({sql_str(glob)}, union_by_name = true)")
        views.append(view)
    return views
