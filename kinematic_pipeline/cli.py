"""``python -m kinematic_pipeline``: materialize the DAG (or a selection) and inspect the warehouse.

``materialize`` runs each asset, in dependency order, with the partitions it needs, through the Dagster
instance in DAGSTER_HOME (so runs, materializations and lineage persist and show in ``dagster dev``).
Trading-day assets run as single-run backfills over the days the source holds within the profile's
range.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from kinematic_pipeline.config import PROFILES, SOURCES, Settings, load_settings

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# Dagster logs one DEBUG line per event (thousands in a backfill); the CLI shows INFO and up. The events
# themselves are all stored in the instance and visible in `dagster dev`.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def _ensure_dagster_home(settings: Settings) -> Path:
    """Use DAGSTER_HOME if set; else the repository's dagster.yaml (found from cwd or the package root)."""
    if os.environ.get("DAGSTER_HOME"):
        home = Path(os.environ["DAGSTER_HOME"]).resolve()
    else:
        candidates = [Path.cwd(), PACKAGE_ROOT]
        home = next((c for c in candidates if (c / "dagster.yaml").exists()), None)
        if home is None:
            home = settings.warehouse / "dagster_home"
            home.mkdir(parents=True, exist_ok=True)
            (home / "dagster.yaml").touch()
        os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    return home


def partition_range(settings: Settings) -> tuple[str, str] | None:
    """First and last trading-day partition key to load: the profile's range within the source's."""
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.sources import make_source

    held = make_source(settings).date_range()
    if held is None:
        return None
    start = max(settings.data.start_date, held[0])
    end = min(settings.data.end_date or held[1], held[1], dt.date.today())
    days = trading_days(start, end)
    if not days:
        return None
    # A bar dated on a closed day after the last session is read with the next session's partition.
    return days[0].isoformat(), days[-1].isoformat()


def _plan(defs, selection: str | None) -> list[list]:
    """Selected asset keys in dependency order, grouped into runs of consecutive same-partitioning assets."""
    import dagster as dg

    graph = defs.resolve_asset_graph()
    sel = dg.AssetSelection.from_string(selection) if selection else dg.AssetSelection.all()
    chosen = set(sel.resolve(graph))
    # An asset defined together with others (a multi_asset) is materialized with all of them.
    for key in list(chosen):
        chosen |= set(graph.get(key).assets_def.keys)
    runs: list[list] = []
    last_partitioning = object()
    for key in graph.toposorted_asset_keys:
        if key not in chosen:
            continue
        partitioning = graph.get(key).partitions_def
        if runs and partitioning == last_partitioning:
            runs[-1].append(key)
        else:
            runs.append([key])
        last_partitioning = partitioning
    return runs


def materialize(settings: Settings, selection: str | None = None) -> int:
    import dagster as dg

    from kinematic_pipeline.definitions import build_definitions

    home = _ensure_dagster_home(settings)
    defs = build_definitions(settings)
    instance = dg.DagsterInstance.get()
    graph = defs.resolve_asset_graph()
    print(
        f"profile={settings.profile} source={settings.data.source} warehouse={settings.warehouse} DAGSTER_HOME={home}"
    )
    for keys in _plan(defs, selection):
        partitions_def = graph.get(keys[0]).partitions_def
        names = ", ".join(k.to_user_string() for k in keys)
        runs: list[dict[str, str]] = [{}]
        if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
            bounds = partition_range(settings)
            if bounds is None:
                print(f"skip {names}: the source holds no bars in the profile's range")
                continue
            runs = [{"dagster/asset_partition_range_start": bounds[0], "dagster/asset_partition_range_end": bounds[1]}]
            print(f"materialize {names} for trading days {bounds[0]} .. {bounds[1]} (one run)")
        elif partitions_def is not None:
            keys_all = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
            runs = [{"dagster/partition": k} for k in keys_all]
            print(f"materialize {names} for partitions {', '.join(keys_all)}")
        else:
            print(f"materialize {names}")
        for tags in runs:
            partition_key = tags.pop("dagster/partition", None)
            result = dg.materialize(
                [*defs.assets, *defs.asset_checks],
                run_config=QUIET_RUN_CONFIG,
                selection=keys,
                instance=instance,
                resources=defs.resources,
                tags=tags,
                partition_key=partition_key,
                raise_on_error=False,
            )
            if not result.success:
                print(f"FAILED: {names} (run {result.run_id}); see `dagster dev` or the log above", file=sys.stderr)
                return 1
    print_summary(settings)
    if (settings.warehouse / "reports").exists() and (selection is None or "report" in selection):
        print()
        print_report(settings)
    return 0


def print_summary(settings: Settings) -> None:
    from kinematic_pipeline.storage import Warehouse, query

    catalog = settings.catalog_path
    print(f"\nResults: Parquet shards under {settings.warehouse}/<asset>/, DuckDB catalog {catalog}")
    if not catalog.exists():
        return
    views = query(settings.warehouse, "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1")["view_name"]
    for view in views:
        rows = query(settings.warehouse, f'SELECT count(*) AS n FROM "{view}"')["n"][0]
        print(f"  view {view:<24} {rows:>12,} rows")
    wh = Warehouse(settings.warehouse)
    if any(wh.foundation_checkpoint(v).exists() for v in settings.train.variants):
        print(f"Models under {wh.root / 'models'}/<variant>/ (foundation/model.pt, adapters/tau=*/):")
        for v in settings.train.variants:
            has = "yes" if wh.foundation_checkpoint(v).exists() else "no"
            print(f"  {v:<10} foundation={has:<4} adapters={wh.adapter_count(v)}")
    print(f'Try: duckdb {catalog} "SELECT * FROM quarantine LIMIT 10"')


def lineage(settings: Settings, model: str, tau: float, ticker: str, cost_bps: float | None) -> int:
    import re

    from kinematic_pipeline.lineage import trace

    if model not in settings.train.variants:
        print(f"unknown model {model!r}: expected one of {', '.join(settings.train.variants)}", file=sys.stderr)
        return 2
    if not re.fullmatch(r"[A-Za-z0-9._^=-]+", ticker):
        print(f"not a ticker: {ticker!r}", file=sys.stderr)
        return 2
    try:
        report = trace(settings, model, tau, ticker, cost_bps)
    except (LookupError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 1
    print("\n".join(report.lines))
    return 0 if report.ok else 1


def print_report(settings: Settings) -> int:
    """The paper's tables of the last materialized report (Markdown), and where the report lives."""
    from kinematic_pipeline.stages.report import REPORT_FILE, TABLES_FILE

    tables = settings.warehouse / "reports" / TABLES_FILE
    if not tables.exists():
        print(f"no report under {settings.warehouse / 'reports'}: materialize the report asset", file=sys.stderr)
        return 1
    print(tables.read_text())
    print(
        f"Report: {settings.warehouse / 'reports' / REPORT_FILE} (figures under {settings.warehouse / 'reports'}/figures/)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kinematic_pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=PROFILES, help="overrides KP_PROFILE")
    parser.add_argument("--source", choices=SOURCES, help="overrides KP_SOURCE")
    parser.add_argument("--source-path", help="overrides KP_SOURCE_PATH")
    parser.add_argument("--warehouse", help="overrides KP_WAREHOUSE")
    sub = parser.add_subparsers(dest="command", required=True)
    mat = sub.add_parser("materialize", help="materialize the whole DAG, or --select a part of it")
    mat.add_argument("--select", help="Dagster asset selection, e.g. 'raw_ohlcv' or 'group:ingest' or '+spline_tokens'")
    sub.add_parser("info", help="print the resolved settings and the catalog's views")
    lin = sub.add_parser("lineage", help="the chain behind a backtest metric, every file re-hashed")
    lin.add_argument("--model", required=True, help="model variant, e.g. splinegpt")
    lin.add_argument("--tau", required=True, type=float, help="label threshold of the adapter, e.g. 0.01")
    lin.add_argument("--ticker", required=True, help="test ticker, e.g. NVDA")
    lin.add_argument("--cost-bps", type=float, help="cost of the backtest row (default: the report's)")
    sub.add_parser("report", help="print the paper's tables of the last report and where it is")
    args = parser.parse_args(argv)

    # The definitions read KP_* when they load: pass overrides through the environment.
    for var, value in (
        ("KP_PROFILE", args.profile),
        ("KP_SOURCE", args.source),
        ("KP_SOURCE_PATH", args.source_path),
        ("KP_WAREHOUSE", args.warehouse),
    ):
        if value:
            os.environ[var] = value
    settings = load_settings()
    if args.command == "materialize":
        return materialize(settings, args.select)
    if args.command == "lineage":
        return lineage(settings, args.model, args.tau, args.ticker, args.cost_bps)
    if args.command == "report":
        return print_report(settings)
    print(settings)
    print_summary(settings)
    return 0
