"""The positive control: which verdict rows say "yes" on a synthetic universe with a planted signal of known strength.

For each strength (the oracle's daily IC, ``KP_PLANTED_IC``; 0 = a random walk) the real CLI materializes the
protocol on the ``ci`` profile's calendar (train 2021, test 2022 in two half-year folds) over ``--tickers``
synthetic names, in a fresh warehouse and Dagster instance: the tokens, the window stores, the probes and rules,
their backtests and the report's verdict (``--models``: the transformers as well, the whole DAG). Then it prints
the detection table: per strength, each verdict row's answer cut to its first words (yes / no evidence / ...), then
per strength what each decision rule does with the oracle (the next return's conditional law) and with every
variant: the report's ``oracle_rules`` and ``decision_rules`` tables (the paper's argmax, the calibrated argmax, the
margin rule).

    python benchmarks/planted_signal.py --strengths 0 0.1 0.2 --out /tmp/planted [--models] [--json table.json]

A warehouse whose verdict exists is reused (``--fresh`` rebuilds it). ``--side-by-side N`` materializes N strengths
at once, each process at one thread (``KP_TRAIN_THREADS=1``, ``OMP_NUM_THREADS=1``): the answers are the verdict's
yes/no, not a golden number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
BASELINES_ONLY = "9+group:baselines or key:pooled_backtests or key:verdict or key:paper_tables"  # the probes' and rules' protocol, and the verdict


def run(
    strength: float, out: Path, tickers: int, models: bool, fresh: bool, one_thread: bool = False
) -> tuple[pl.DataFrame, float]:
    """Materialize the protocol for one strength (``one_thread``: its process at one thread); (the verdict table,
    seconds)."""
    home = out / f"ic{strength:g}"
    verdict = home / "warehouse" / "reports" / "tables" / "verdict.parquet"
    if fresh and home.exists():
        shutil.rmtree(home)
    seconds = 0.0
    if not verdict.exists():
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "KP_PROFILE": "ci",
            "KP_WAREHOUSE": str(home / "warehouse"),
            "KP_PLANTED_IC": f"{strength:g}",
            "KP_SYNTHETIC_TICKERS": str(tickers),
        }
        for var in ("KP_SOURCE", "KP_SOURCE_PATH", "KP_START_DATE", "KP_END_DATE"):
            env.pop(var, None)
        if one_thread:
            env.update(KP_TRAIN_THREADS="1", OMP_NUM_THREADS="1")
        command = [sys.executable, "-m", "kinematic_pipeline", "materialize"]
        command += [] if models else ["--select", BASELINES_ONLY]
        start = time.perf_counter()
        proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        (home / "materialize.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise SystemExit(f"strength {strength:g}: materialize failed, see {home / 'materialize.log'}")
    return pl.read_parquet(verdict), seconds


def short(answer: str) -> str:
    """An answer's verdict: its words up to the first colon or parenthesis."""
    return answer.split(":")[0].split(" (")[0].strip()


def row_name(row: dict) -> str:
    test = row["Test"].split(":")[0] if row["Question"].startswith("Do spline") else row["Question"]
    return test[:90]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strengths", type=float, nargs="+", default=[0.0, 0.1, 0.2])
    parser.add_argument("--tickers", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("/tmp/kp_planted"))
    parser.add_argument("--models", action="store_true", help="the whole DAG, transformers included")
    parser.add_argument("--fresh", action="store_true", help="rebuild warehouses whose verdict exists")
    parser.add_argument("--json", type=Path, help="write the table here")
    parser.add_argument("--side-by-side", type=int, default=1, help="strengths materialized at once, one thread each")
    args = parser.parse_args(argv)
    columns: dict[str, dict[str, str]] = {}
    workers = max(1, args.side_by_side)
    with ThreadPoolExecutor(workers) as pool:
        runs = [
            pool.submit(run, strength, args.out, args.tickers, args.models, args.fresh, workers > 1)
            for strength in args.strengths
        ]
    for strength, done in zip(args.strengths, runs, strict=True):
        verdict, seconds = done.result()
        print(f"strength {strength:g}: {verdict.height} verdict rows" + (f" in {seconds:.0f} s" if seconds else ""))
        columns[f"IC {strength:g}"] = {row_name(r): short(r["Answer"]) for r in verdict.iter_rows(named=True)}
    rows = list(dict.fromkeys(name for column in columns.values() for name in column))
    table = pl.DataFrame({"row": rows, **{k: [v.get(r, "-") for r in rows] for k, v in columns.items()}})
    with pl.Config(tbl_rows=100, fmt_str_lengths=100, tbl_width_chars=250, tbl_hide_dataframe_shape=True):
        print(table)
    if args.json:
        args.json.write_text(json.dumps(table.to_dicts(), indent=1))
    for strength in args.strengths:
        tables = args.out / f"ic{strength:g}" / "warehouse" / "reports" / "tables"
        for name in ("oracle_rules", "decision_rules"):
            if (tables / f"{name}.md").exists():
                print(f"\nstrength {strength:g}, {name}:\n{(tables / f'{name}.md').read_text()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
