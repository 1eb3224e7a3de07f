"""Compare two warehouses file by file: the sha256 of every Parquet shard and report file.

    python tools/compare_warehouses.py BEFORE AFTER

Prints the files that are identical, differ, or exist on one side only (a file split into several, as
``SPLIT_FILES`` lists, is compared as the same rows), then, for the evaluation assets
that split Buy & Hold out of each partition (backtests, equity_curves, trades), whether every strategy row
of BEFORE is equal in AFTER, and whether the provenance rows are equal once the columns and rows that
record the code revision and the Dagster run are set aside. A refactor that keeps results must show no
other difference. Exit code 1 when anything else differs.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import polars as pl

SKIP_DIRS = ("dagster", "models")  # Dagster's own storage; checkpoints are compared separately below
SPLIT_ASSETS = ("backtests", "equity_curves", "trades")
REPORT_FILES = ("reports/tables.md",)
# Files a refactor split into several (old -> glob of the new ones): compared as the same rows, in any order.
SPLIT_FILES = {"corpus_stats/stats.parquet": "corpus_stats/*.parquet"}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and (
            path.suffix == ".parquet" or rel in REPORT_FILES or path.suffix in (".pt", ".safetensors")
        ):
            if not rel.startswith(SKIP_DIRS) or path.suffix in (".pt", ".safetensors"):
                out[rel] = path
    return out


def strategy_rows_equal(before: Path, after_dir: Path) -> bool:
    old = pl.read_parquet(before).filter(pl.col("variant") != "buy_and_hold")
    new = pl.read_parquet(after_dir / before.name)
    bench_old = pl.read_parquet(before).filter(pl.col("variant") == "buy_and_hold")
    bench_new = pl.read_parquet(after_dir / "buy_and_hold.parquet")
    return old.equals(new) and bench_old.equals(bench_new)


def provenance_equal(before: Path, after: Path) -> bool:
    def core(path: Path) -> pl.DataFrame:
        # code rows hold the git revision and run id; the split assets' rows hash the shards compared above
        frame = pl.read_parquet(path).filter(~pl.col("link").is_in(["code", *SPLIT_ASSETS]))
        return frame.drop([c for c in ("ticker",) if c in frame.columns])

    return core(before).equals(core(after))


def split_rows_equal(before: Path, after_files: list[Path]) -> bool:
    old = pl.read_parquet(before)
    new = pl.concat([pl.read_parquet(p) for p in after_files])
    return old.sort(old.columns).equals(new.sort(new.columns))


def main(before_root: str, after_root: str) -> int:
    before, after = Path(before_root), Path(after_root)
    a, b = files(before), files(after)
    same = [k for k in a if k in b and sha(a[k]) == sha(b[k])]
    differ = sorted(k for k in a if k in b and sha(a[k]) != sha(b[k]))
    only_before, only_after = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    kinds: dict[str, int] = {}
    for rel in same:
        kinds[rel.split("/")[0]] = kinds.get(rel.split("/")[0], 0) + 1
    print(f"identical: {len(same)} files: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    unexplained = []
    for rel in differ:
        asset = rel.split("/")[0]
        if asset in SPLIT_ASSETS:
            ok = strategy_rows_equal(a[rel], b[rel].parent)
            print(f"differs (Buy & Hold moved to buy_and_hold.parquet): {rel}: strategy and benchmark rows equal: {ok}")
        elif asset == "provenance":
            ok = provenance_equal(a[rel], b[rel])
            print(f"differs (provenance: code revision, run id, no ticker column): {rel}: link rows equal: {ok}")
        else:
            ok = False
            print(f"DIFFERS: {rel}")
        if not ok:
            unexplained.append(rel)
    split_into = set()
    for rel in list(only_before):
        if rel in SPLIT_FILES:
            parts = sorted(after.glob(SPLIT_FILES[rel]))
            ok = bool(parts) and split_rows_equal(a[rel], parts)
            names = ", ".join(p.relative_to(after).as_posix() for p in parts)
            print(f"split: {rel} -> {names}: the same rows: {ok}")
            split_into |= {p.relative_to(after).as_posix() for p in parts}
            if ok:
                only_before.remove(rel)
    for rel in only_before:
        print(f"only in {before}: {rel}")
    for rel in only_after:
        expected = rel.endswith("buy_and_hold.parquet") or rel in split_into
        print(f"only in {after}: {rel}" + (" (the Buy & Hold shard or a split file)" if expected else ""))
        if not expected:
            unexplained.append(rel)
    unexplained += only_before
    print(f"{len(same)} identical, {len(differ)} differ, {len(unexplained)} unexplained difference(s)")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
