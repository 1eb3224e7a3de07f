"""A warehouse that repairs itself: a damaged file is moved aside with what belongs to it (so the next
materialization rewrites the day), and a catalog that cannot be opened is rebuilt from the folders, since it
holds only views (``REPAIR``, which the ``Warehouse`` hands to ``catalog.py``). Also the one-time move of an older
warehouse's flat days into day units (``upgrade_flat_days_once``, run when a ``Warehouse`` is built)."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import polars as pl

from kinematic_pipeline.warehouse import day_units
from kinematic_pipeline.warehouse.catalog import Repair, create_view, sql_str
from kinematic_pipeline.warehouse.layout import (
    DAMAGED_DIR,
    DAY_UNITS,
    FLAT_SKIP,
    MANIFESTS_DIR,
    SCHEMA_DIR,
    STAGING_DIR,
    is_day_name,
)


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
        manifest = root / MANIFESTS_DIR / asset / path.name
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


def rebuild_views(root: Path, con) -> list[str]:
    """Every catalog view, re-created from the folders of the warehouse (the catalog holds only views): the
    members of each day unit with a typed ``_schema`` file, each folder of ``*.parquet`` shards, each folder of
    manifests. Returns the views' names."""
    root, views = Path(root), []
    for asset, members in DAY_UNITS.items():
        for member, name in members.items():
            if (root / asset / SCHEMA_DIR / name).exists():
                view = f"{asset}_manifest" if member == "manifest" else member
                body = f"SELECT * FROM read_parquet({sql_str(f'{asset}/*/{name}')}, union_by_name = true)"
                create_view(con, root, view, body, repair=REPAIR)
                views.append(view)
    folders = [(p.name, p) for p in sorted(root.iterdir()) if p.is_dir() and p.name not in FLAT_SKIP]
    folders += [(f"{p.name}_manifest", p) for p in sorted((root / MANIFESTS_DIR).glob("*")) if p.is_dir()]
    for view, folder in folders:
        if folder.name in DAY_UNITS or folder.name.startswith((".", "_")) or not any(folder.glob("*.parquet")):
            continue
        glob = str((folder / "*.parquet").relative_to(root))
        body = f"SELECT * FROM read_parquet({sql_str(glob)}, union_by_name = true)"
        create_view(con, root, view, body, repair=REPAIR)
        views.append(view)
    return views


REPAIR = Repair(damaged_file=quarantine_damaged, rebuild_views=rebuild_views)

_UPGRADED: set[tuple[str, str]] = set()  # (warehouse, day-unit asset) whose older flat days were moved this process


def upgrade_flat_days_once(wh) -> None:
    """``upgrade_flat_days`` of every day-unit asset, once per process and warehouse (the ``Warehouse`` calls it
    when it is built; later calls cost a set lookup). Path getters never move files."""
    for asset in DAY_UNITS:
        key = (str(wh.root), asset)
        if key not in _UPGRADED:
            upgrade_flat_days(wh, asset)
            _UPGRADED.add(key)


def upgrade_flat_days(wh, asset: str) -> int:
    """Move the day shards of a warehouse written before ``asset`` became a day unit (``<asset>/<day>.parquet``
    with ``manifests/<asset>/<day>.parquet``) into their units, each by one rename of a staged folder; a shard
    without its manifest stays where it is (its day is re-written by the next materialization). Returns the days
    moved; a no-op (one stat) once done."""
    root = wh.root
    flat = root / MANIFESTS_DIR / asset
    if asset not in DAY_UNITS or not flat.is_dir():
        return 0
    members, moved = DAY_UNITS[asset], 0
    with day_units.day_lock(wh, asset, "upgrade"):
        for manifest in sorted(flat.glob("*.parquet")):
            shard = root / asset / manifest.name
            if not is_day_name(manifest.stem) or not shard.exists():
                continue
            staging = root / asset / STAGING_DIR / f"{manifest.stem}.upgrade"
            staging.mkdir(parents=True, exist_ok=True)
            shard.rename(staging / members[asset])
            manifest.rename(staging / members["manifest"])
            final = wh.unit_dir(asset, manifest.stem)
            if final.exists():  # a unit written since: it is the newer day
                shutil.rmtree(staging)
            else:
                staging.rename(final)
            moved += 1
        if not any(flat.iterdir()):
            flat.rmdir()
        days = day_units.unit_days(root / asset)
        if moved and days:  # the catalog's views of the asset: over the units now, typed by a moved day
            unit = wh.unit_dir(asset, days[0])
            schemas = {m: dict(pl.read_parquet_schema(unit / name)) for m, name in members.items()}
            day_units.ensure_unit_views(wh, asset, schemas)
    if moved:
        print(
            f"warehouse {root}: moved {moved} {asset} day(s) into day units (shard and manifest "
            "in one folder, swapped as one)",
            file=sys.stderr,
        )
    return moved
