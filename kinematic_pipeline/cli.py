"""``python -m kinematic_pipeline``: materialize the DAG (or a selection) and inspect the warehouse.

``materialize`` runs each asset, in dependency order, with the partitions it needs, through the Dagster
instance in DAGSTER_HOME (so runs, materializations and lineage persist and show in ``dagster dev``).
Trading-day assets run as single-run backfills over the days the source holds within the profile's
range.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import sys
from pathlib import Path

from polars.exceptions import PanicException

from kinematic_pipeline.config import PROFILES, SOURCES, Settings, load_settings
from kinematic_pipeline.config.fingerprint import settings_tree
from kinematic_pipeline.folds import check_folds_have_test_days, evaluated_folds, fold_names
from kinematic_pipeline.lineage import LineageReport, pooled_record, trace, trace_pooled
from kinematic_pipeline.orchestration.plan import FOLD_GROUPS, normalize_selection, partition_range, plan_runs
from kinematic_pipeline.orchestration.side_by_side import Workers, planned_chains, run_side_by_side, step_seconds
from kinematic_pipeline.orchestration.timings import print_timings
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.report.answers import answers_section, first_screen
from kinematic_pipeline.run_keys import named_task, policy_seeds, run_policies
from kinematic_pipeline.warehouse.layout import MODELS_DIR

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# Dagster logs one DEBUG line per event (thousands in a backfill) and a step's failure with its stack
# trace. The CLI prints its own lines (the plan, the ingest totals, one line per failure); Dagster's log
# lines from INFO up, stack traces included, only with --debug. Every event is stored in the instance
# and visible in `dagster dev` either way.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
DEBUG_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


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


def materialize(settings: Settings, selection: str | None = None, debug: bool = False, resume: bool = False) -> int:
    # Read a file source first: an unreadable file is reported in a second, before Dagster loads. Other
    # sources (yfinance goes to the network) are read only when a trading-day asset is selected.
    unread = object()
    bounds = partition_range(settings) if settings.data.source in ("parquet", "csv") else unread
    selection_text = normalize_selection(selection) if selection else None

    import dagster as dg

    from kinematic_pipeline.definitions import build_definitions
    from kinematic_pipeline.orchestration.assets_scaling import off_dag_groups
    from kinematic_pipeline.orchestration.partitions import PARTITION_TAG, range_tags
    from kinematic_pipeline.orchestration.resume import SETTINGS_TAG, fingerprint, resume_point
    from kinematic_pipeline.orchestration.runs import fail_orphaned_runs, failure_line, owner_tags

    home = _ensure_dagster_home(settings)
    defs = build_definitions(settings)
    instance = dg.DagsterInstance.get()
    fail_orphaned_runs(instance)
    graph = defs.resolve_asset_graph()
    print(
        f"profile={settings.profile} source={settings.data.source} warehouse={settings.warehouse} DAGSTER_HOME={home}"
    )
    plan = plan_runs(defs, selection_text, selection, off_dag_groups(settings))
    if any(graph.get(k).group_name in FOLD_GROUPS for keys in plan for k in keys):
        last_day = settings.data.end_date
        if last_day is None and isinstance(bounds, tuple):
            last_day = dt.date.fromisoformat(bounds[1])
        check_folds_have_test_days(settings, last_day)  # before any run: a fold with no test day is a setting's error
    own_tags = {**owner_tags(), SETTINGS_TAG: fingerprint(settings)}
    point = resume_point(instance, settings) if resume else None
    if point is not None:
        own_tags |= point.tags()
        trust = "" if point.checked else " (its runs carry no settings fingerprint: same settings and code assumed)"
        print(f"resume invocation {point.invocation}: {len(point.done)} asset partitions finished{trust}")
    history = step_seconds(instance) if settings.train.processes > 1 else {}  # longest chains first
    with Workers(settings) as workers:  # the side-by-side groups' processes, spawned once
        for keys in plan:
            partitions_def = graph.get(keys[0]).partitions_def
            names = ", ".join(k.to_user_string() for k in keys)
            runs: list[dict[str, str]] = [{}]
            if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
                if bounds is unread:
                    bounds = partition_range(settings)
                if bounds is None:
                    print(f"skip {names}: the source holds no bars in the profile's range")
                    continue
                runs = [range_tags(bounds[0], bounds[1])]
                print(f"materialize {names} for trading days {bounds[0]} .. {bounds[1]} (one run)")
            elif partitions_def is not None:
                keys_all = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
                runs = [{PARTITION_TAG: k} for k in keys_all]
                print(f"materialize {names} for partitions {', '.join(keys_all)}")
            else:
                print(f"materialize {names}")
            run_config = DEBUG_RUN_CONFIG if debug else QUIET_RUN_CONFIG
            work = planned_chains(settings, graph, keys, runs, history)
            if point is not None:
                runs, work = point.left([k.to_user_string() for k in keys], runs, work)
                if not runs and not work:
                    continue
            if work:
                at_once = settings.train.processes
                chain = "a model or tokenization, seed and tau each, folds in order"
                print(f"  side by side: {len(work)} chains ({chain}), {at_once} at once")
                failed = [o for o in run_side_by_side(settings, work, own_tags, run_config, workers=workers) if o.error]
                if failed:
                    gc.collect()
                    first = failed[0]
                    assets = ", ".join(first.chain.assets)
                    where = "" if first.partition is None else f" [{first.partition}]"
                    print(f"FAILED: {assets}{where} (run {first.run_id}): {first.error}", file=sys.stderr)
                    return 1
                continue
            for tags in runs:
                partition_key = tags.pop(PARTITION_TAG, None)
                tags = {**tags, **own_tags}
                result = dg.materialize(
                    [*defs.assets, *defs.asset_checks],
                    run_config=run_config,
                    selection=keys,
                    instance=instance,
                    resources=defs.resources,
                    tags=tags,
                    partition_key=partition_key,
                    raise_on_error=False,
                )
                if not result.success:
                    gc.collect()  # close progress bars left open by the failed step first: the error is the last line
                    print(f"FAILED: {names} (run {result.run_id}): {failure_line(result)}", file=sys.stderr)
                    return 1
                print(f"materialized {names} (run {result.run_id})")
                _print_ingest_totals(result, keys)
                _print_check_warnings(result)
    print_summary(settings)
    if settings.warehouse.report_file.exists() and (selection is None or "report" in selection):
        lines = answers_section(settings.warehouse.report_file.read_text())
        first = first_screen(lines) or lines
        print(f"\nAnswers ({len(first)} of the report's {len(lines)}):\n" + "\n".join(first))
        print(f"Report: {settings.warehouse.report_file} (every table: python -m kinematic_pipeline report)")
    return 0


def _print_check_warnings(result) -> None:
    """One ``warning:`` line per row a failed warning check flagged (a suspected unadjusted split, tickers that
    differ only by case): what the UI shows, on the CLI too."""
    import dagster as dg

    for evaluation in result.get_asset_check_evaluations():
        if evaluation.passed or evaluation.severity != dg.AssetCheckSeverity.WARN:
            continue
        meta = evaluation.metadata
        text = meta["warnings"].value if "warnings" in meta else meta["detail"].value if "detail" in meta else ""
        where = f"{evaluation.asset_key.to_user_string()}.{evaluation.check_name}"
        for line in [line for line in str(text).split("\n") if line] or ["failed"]:
            print(f"warning: {where}: {line}", file=sys.stderr)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _print_ingest_totals(result, keys) -> None:
    """How every source row was accounted for (kept, quarantined, out of range), and what to look at."""
    if not any(k.to_user_string() == "raw_ohlcv" for k in keys):
        return
    for mat in result.asset_materializations_for_node("raw_ohlcv")[:1]:  # one per partition, same metadata
        meta = mat.metadata
        if "reconciliation" in meta:
            print(f"raw_ohlcv rows: {meta['reconciliation'].value}")
        notes = meta["notes"].value if "notes" in meta else ""
        for note in filter(None, notes.split("\n")):
            print(f"note: {note}")


def print_summary(settings: Settings) -> None:
    wh = settings.warehouse
    catalog = wh.catalog_path
    print(f"\nResults: Parquet shards under {wh}/<asset>/, DuckDB catalog {catalog}")
    if not catalog.exists():
        return
    views = wh.query("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1")["view_name"]
    for view in views:
        rows = wh.query(f'SELECT count(*) AS n FROM "{view}"')["n"][0]
        print(f"  view {view:<24} {rows:>12,} rows")
    counts = {v: wh.model_count(v) for v in settings.train.variants}
    if any(foundations for foundations, _ in counts.values()):
        print(f"Models under {wh / MODELS_DIR}/<variant>/seed=<seed>/ (foundation/model.pt, adapters/tau=*/):")
        for v, (foundations, adapters) in counts.items():
            print(f"  {v:<10} foundations={foundations} adapters={adapters}")
    print(f'Try: duckdb {catalog} "SELECT * FROM quarantine LIMIT 10"')


def lineage(
    settings: Settings,
    model: str,
    tau: str,
    ticker: str,
    cost_bps: float | None,
    seed: int | None = None,
    fold: str | None = None,
) -> int:
    import duckdb

    variants = settings.evaluated_variants
    if model not in variants:
        print(f"unknown model {model!r}: expected one of {', '.join(variants)}", file=sys.stderr)
        return 2

    if fold is not None and fold not in fold_names(settings):
        print(f"unknown fold {fold!r}: expected one of {', '.join(map(str, fold_names(settings)))}", file=sys.stderr)
        return 2
    # Without --fold/--seed: the pooled record the report prints, and every (fold, seed) chain behind it; with
    # either, the chains of that fold and/or seed only, each on its own.
    try:
        task = named_task(settings, str(tau))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    folds = evaluated_folds(settings, task) if fold is None else (fold,)
    seeds = policy_seeds(settings, model) if seed is None else (seed,)
    chains = [Policy.named(settings.folds, model, s, task, f) for f in folds for s in seeds]
    if fold is None and seed is None:  # the report's record: the run's policies only (KP_SEEDS, the taus, folds)
        grid = set(run_policies(settings))
        chains = [p for p in chains if p in grid]
        if not chains:
            print(
                f"no policy of this run is {model} at tau={task.key} (the run's seeds, taus and folds: KP_SEEDS, "
                "tokenize.taus, KP_FOLDS); trace another run's with --seed and --fold",
                file=sys.stderr,
            )
            return 2
    # Any ticker ingest accepts (BRK/B, "BRK B", unicode) is fine: the query binds it as a parameter.
    try:
        if fold is None and seed is None and task.rules:  # a forecast's backtests are not pooled: each chain
            report = trace_pooled(settings, pooled_record(settings), model, task.tau, ticker.strip(), chains, cost_bps)
        else:
            reports = [trace(settings, policy, ticker.strip(), cost_bps) for policy in chains]
            report = LineageReport([line for r in reports for line in r.lines], sum(r.checked for r in reports))
            report.problems = [p for r in reports for p in r.problems]
    except (LookupError, FileNotFoundError, StalePairError) as exc:
        print(_one_line(exc), file=sys.stderr)
        return 1
    except duckdb.Error as exc:
        print(
            f"catalog {settings.warehouse.catalog_path}: {_one_line(exc)}. Hint: materialize the report "
            "(python -m kinematic_pipeline materialize) so the backtests and provenance views exist",
            file=sys.stderr,
        )
        return 1
    print("\n".join(report.lines))
    return 0 if report.ok else 1


def _require_warehouse(settings: Settings) -> bool:
    """Read-only commands never create the warehouse (nor its catalog or lock file) by looking at it."""
    if settings.warehouse.catalog_path.exists():
        return True
    where = settings.warehouse if not settings.warehouse.exists() else settings.warehouse.catalog_path
    what = "no warehouse" if not settings.warehouse.exists() else "no catalog"
    print(
        f"{what} at {where}. Hint: set KP_WAREHOUSE (or --warehouse) to an existing warehouse, "
        "or run `python -m kinematic_pipeline materialize` first",
        file=sys.stderr,
    )
    return False


def print_report(settings: Settings) -> int:
    """The paper's tables of the last materialized report (Markdown), and where the report lives."""
    wh = settings.warehouse
    if not wh.tables_file.exists():
        print(f"no report under {wh.reports_dir}: materialize the report asset", file=sys.stderr)
        return 1
    print(wh.tables_file.read_text())
    print(f"Report: {wh.report_file} (figures under {wh.figures_dir}/)")
    return 0


def timings(run_id: str | None = None, invocation: bool = False) -> int:
    """Each step's wall time of a finished run (or of every run of one ``materialize``) and the shares of data
    preparation, training, evaluation and bookkeeping (``orchestration/timings.py``); reads the instance only."""
    if not os.environ.get("DAGSTER_HOME"):
        home = next((c for c in (Path.cwd(), PACKAGE_ROOT) if (c / "dagster.yaml").exists()), None)
        if home is None:
            print("no Dagster instance: set DAGSTER_HOME to the instance the runs were stored in", file=sys.stderr)
            return 1
        os.environ["DAGSTER_HOME"] = str(home)
    try:
        print(print_timings(run_id, invocation))
    except LookupError as exc:
        print(_one_line(exc.args[0] if exc.args else exc), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kinematic_pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=PROFILES, help="overrides KP_PROFILE")
    parser.add_argument("--source", choices=SOURCES, help="overrides KP_SOURCE")
    parser.add_argument("--source-path", help="overrides KP_SOURCE_PATH")
    parser.add_argument("--warehouse", help="overrides KP_WAREHOUSE")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    # --debug also after the command (`materialize --debug`), as users type it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    mat = sub.add_parser("materialize", parents=[common], help="materialize the whole DAG, or --select a part of it")
    mat.add_argument(
        "--select",
        help="assets to materialize: names ('raw_ohlcv', 'raw_ohlcv,spline_tokens', 'raw_ohlcv or labels') or "
        "Dagster's selection syntax ('group:ingest', '+spline_tokens')",
    )
    mat.add_argument(
        "--resume",
        action="store_true",
        help="finish the last materialize on this host that was stopped: skip what its runs finished "
        "(same settings and code required)",
    )
    sub.add_parser("info", parents=[common], help="print the resolved settings and the catalog's views")
    lin = sub.add_parser("lineage", parents=[common], help="the chain behind a backtest metric, every file re-hashed")
    lin.add_argument("--model", required=True, help="model variant, e.g. splinegpt")
    lin.add_argument("--tau", required=True, help="the adapter's label threshold (0.01) or forecast task (vol5)")
    lin.add_argument("--ticker", required=True, help="test ticker, e.g. NVDA")
    lin.add_argument("--cost-bps", type=float, help="cost of the backtest row (default: the report's)")
    lin.add_argument(
        "--seed", type=int, help="trace this seed's chains only (default: the report's pooled record, every seed)"
    )
    lin.add_argument(
        "--fold", help="trace this fold's chains only, e.g. 2019 (default: the report's pooled record, every fold)"
    )
    sub.add_parser("report", parents=[common], help="print the paper's tables of the last report and where it is")
    tim = sub.add_parser(
        "timings", parents=[common], help="each step's wall time of a finished run and the share of each kind of work"
    )
    tim.add_argument("--run-id", help="the run (default: the latest run in the instance at DAGSTER_HOME)")
    tim.add_argument(
        "--invocation",
        action="store_true",
        help="every run of the `materialize` command that started the run (the whole DAG), taken together",
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`report | head`): not an error; stdout must not be flushed again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (Exception, PanicException) as exc:  # one line for the user (a Polars panic too); the traceback on request
        if args.debug:
            raise
        print(f"error: {_one_line(exc)} (run with --debug for the traceback)", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    # The flags override KP_*; the definitions are built from these settings (cli.materialize), in process.
    settings = load_settings(args.profile, source=args.source, source_path=args.source_path, warehouse=args.warehouse)
    if args.command == "materialize":
        return materialize(settings, args.select, debug=args.debug, resume=args.resume)
    if args.command == "timings":
        return timings(args.run_id, args.invocation)
    if not _require_warehouse(settings):
        return 1
    if args.command == "lineage":
        return lineage(settings, args.model, args.tau, args.ticker, args.cost_bps, args.seed, args.fold)
    if args.command == "report":
        return print_report(settings)
    print(settings_tree(settings))
    print_summary(settings)
    return 0
