"""Lineage: what every backtest was built from (written with it), and the walk back from a reported metric.

``provenance_frame`` records, beside a policy's backtests, one row per file the numbers depend on (its
outputs, predictions and the shards they read, the adapter and foundation files, the window store and every
training day shard whose windows were served, the test-period token and raw_ohlcv shards) with its sha256,
plus the code versions (``code_versions.py``: the one home of the stages' versions, which the Dagster assets
declare too). ``trace`` reads the ``backtests`` and ``provenance`` views back and re-hashes every file the
chain names, so each link is checked against the bytes on disk: backtest -> predictions -> adapter ->
foundation -> window store and token shards -> raw bars. No dagster here.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import check_pair, recorded_file, warehouse_path
from kinematic_pipeline.pins import check_backtests_current, check_evaluation, stale_token_days
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.report.tables import runs_at, sharpe_cell, with_days_in_market
from kinematic_pipeline.run_keys import keep_run_policies, run_keys_digest
from kinematic_pipeline.tasks.buy_sell_hold import TAU_SQL
from kinematic_pipeline.tokenizations import TOKENIZATIONS
from kinematic_pipeline.variants import models
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.layout import (
    POOLED_ASSET,
    POOLED_PIN_FILE,
    PREDICTION_INPUTS,
    PREDICTION_MODEL,
    PROVENANCE,
    TARGETING_BACKTESTS,
    VALIDATION_PREDICTIONS,
)

LINK_ORDER = (
    "targeting_backtests",
    "backtests",
    "equity_curves",
    "trades",
    "margin_backtests",
    "predictions",
    "predictions_validation",
    "predictions_inputs",
    "predictions_model",
    "probe",
    "features",
    "adapter",
    "foundation",
    "finetune_lineage",
    "pretrain_lineage",
    "window_store",
    "training_shard",
    "test_shard",
    "raw_ohlcv",
)
PROVENANCE_SCHEMA: dict[str, pl.DataType] = {  # every link holds for every ticker of the (variant, tau, seed)
    "variant": pl.String,
    "tau": pl.Float64,
    "seed": pl.Int64,
    "fold": pl.String,  # the walk-forward fold (folds.Fold.label)
    "link": pl.String,  # one of LINK_ORDER, or code
    "asset": pl.String,
    "date": pl.String,  # the shard's partition (trading day), when it has one
    "split": pl.String,  # training shards: pretrain_train | pretrain_val | finetune_train | finetune_val
    "path": pl.String,
    "sha256": pl.String,  # of the file's bytes at the time of the backtest (code rows: the version)
}


def provenance_frame(
    settings: Settings,
    policy: Policy,
    predictor,
    *,
    outputs: dict[str, Path],
    code_versions: dict[str, str],
    sized_on: list[tuple] = (),
):
    """The lineage of one policy's backtests, one row per file (or code version) it depends on.

    ``outputs``: asset -> file written by the backtests (backtests, equity curves, trades, margin backtests);
    the predictions, their validation-day file and the list of shards they read follow, then the adapter, the
    foundation, what each trained on (``shards_used.parquet``: only what was served), the test shards; and
    ``sized_on``, (asset, path, sha256, day) of the raw shards a forecast's position sizes were set from (its target
    volatility: ``stages.backtests.materialize_targeting``), split ``sizing``. A policy without a tau (a forecast)
    has a null one."""
    wh, variant = settings.warehouse, policy.variant.name
    rows: list[dict] = []

    def add(link: str, asset: str, path: Path, sha: str | None = None, **extra) -> None:
        # relative to the warehouse: `lineage` in a copied warehouse checks the copy's files, not the original's
        rows.append(
            dict(link=link, asset=asset, path=warehouse_path(wh, path), sha256=sha or file_sha256(Path(path)), **extra)
        )

    inputs = wh.predictions_extra(PREDICTION_INPUTS, policy)
    files = {
        **outputs,
        "predictions": wh.predictions_file(policy),
        "predictions_validation": wh.predictions_extra(VALIDATION_PREDICTIONS, policy),
        "predictions_inputs": inputs,
        "predictions_model": wh.predictions_extra(PREDICTION_MODEL, policy),  # the model files' hashes it was made with
    }
    for asset, path in files.items():
        add(asset, asset, path)
    predictor.provenance(wh, policy, add)  # the model's files (``predictors``): an adapter, a probe's fit, none
    for shard in exact.read_parquet(inputs).iter_rows(named=True):
        add(
            _input_link(shard["asset"]),
            shard["asset"],
            recorded_file(wh, shard["asset"], shard["date"], shard["path"]),
            shard["content_hash"],
            date=shard["date"] or None,
        )
    for asset, path, sha, day in sized_on:
        add("raw_ohlcv", asset, path, sha, date=day.isoformat(), split="sizing")
    for name, version in code_versions.items():
        rows.append(dict(link="code", asset=name, path="", sha256=version))
    keys = ("variant", "tau", "seed", "fold")
    frame = pl.DataFrame(rows, schema={k: v for k, v in PROVENANCE_SCHEMA.items() if k not in keys})
    frame = frame.with_columns(
        pl.lit(variant).alias("variant"),
        pl.lit(getattr(policy.task, "tau", None), pl.Float64).alias("tau"),
        pl.lit(policy.seed).alias("seed"),
        pl.lit(policy.fold.label).alias("fold"),
    )
    return frame.select(list(PROVENANCE_SCHEMA)).cast(PROVENANCE_SCHEMA)  # type: ignore[arg-type]


def _input_link(asset: str) -> str:
    """The link of a file a prediction read: raw bars, a features file, a window store or a test token shard."""
    if asset == "raw_ohlcv":
        return "raw_ohlcv"
    for suffix, link in (("_features", "features"), ("_window_store", "window_store")):
        if asset.endswith(suffix):
            return link
    return "test_shard"


def _check_token_pins(settings: Settings, prov: pl.DataFrame, report: LineageReport) -> None:
    """The token shards of the chain (test and training days) against the raw days behind their windows, the
    64-session look-back included: each day's recorded raw-input digest equals that of the raw manifests now."""

    tokens = [t.tokens_asset for t in TOKENIZATIONS.values()]
    shards = prov.filter(pl.col("asset").is_in(tokens) & pl.col("date").is_not_null())
    checked, stale = 0, []
    for asset in sorted(set(shards["asset"].to_list())):
        days = sorted({dt.date.fromisoformat(str(d)) for d in shards.filter(pl.col("asset") == asset)["date"]})
        days = [d for d in days if settings.warehouse.manifest(asset, d).exists()]
        checked += len(days)
        stale += [(asset, day) for day, _, _ in stale_token_days(settings, asset, days)]
    if not checked:
        return
    if stale:
        asset, day = stale[0]
        report.problems.append(
            f"tokens: {len(stale)} token day(s) were tokenized from raw_ohlcv days re-ingested since (first: {asset} "
            f"{day}); re-materialize {asset} for them"
        )
        report.lines.append(f"  tokens <- raw      {len(stale)} of {checked} token days STALE (see below)")
    else:
        report.lines.append(f"  tokens <- raw      {checked} token days match the raw days behind them (look-back)")


@dataclass
class LineageReport:
    lines: list[str] = field(default_factory=list)
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.checked > 0 and not self.problems


def _fmt(x) -> str:
    return "N/A" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _check(rows: pl.DataFrame, report: LineageReport, wh) -> int:
    """Re-hash each file (``recorded_file``: a path is under the warehouse being traced, so a copy checks its own
    files); record missing files and hash mismatches. Returns the number that match."""
    good = 0
    for asset, name, sha, date in rows.select("asset", "path", "sha256", "date").iter_rows():
        report.checked += 1
        path = recorded_file(wh, asset, date, name)
        where = f"{path}" + (f" (partition {date})" if date else "")
        if not path.exists():
            report.problems.append(f"missing: {where}")
        elif file_sha256(path) != sha:
            report.problems.append(f"hash mismatch: {where} is not the file the backtest used")
        else:
            good += 1
    return good


def trace(settings: Settings, policy: Policy, ticker: str, cost_bps: float | None = None) -> LineageReport:
    """The chain behind the backtest of ``policy`` on ``ticker`` (at the report's cost by default), every file
    re-hashed, with its verdict line: a rule's backtest, or a forecast's volatility-targeted one."""
    chain = _chain if policy.task.rules else _targeting_chain
    return _concluded(chain(settings, policy, ticker, cost_bps), "files checked")


def _concluded(report: LineageReport, what: str) -> LineageReport:
    verdict = "every link resolves to a file with the recorded hash" if report.ok else "BROKEN LINKS:"
    report.lines.append(f"{report.checked} {what}: {verdict}")
    report.lines.extend(f"  {p}" for p in report.problems[:20])
    return report


def _chain(settings: Settings, policy: Policy, ticker: str, cost_bps: float | None) -> LineageReport:
    wh, report = settings.warehouse, LineageReport()
    cost = settings.evaluate.report_cost_bps if cost_bps is None else cost_bps
    variant, tau, seed = policy.variant.name, policy.task.tau, policy.seed
    fold = policy.fold.label
    metrics = wh.query(
        f"SELECT * FROM backtests WHERE variant = ? AND {TAU_SQL} AND ticker = ? AND cost_bps = ? AND seed = ? "
        "AND fold = ?",
        [variant, tau, ticker, cost, seed, fold],
    )
    if metrics.height == 0:
        have = wh.query(
            "SELECT DISTINCT variant, tau, seed, ticker, fold FROM backtests WHERE tau IS NOT NULL ORDER BY ALL"
        )
        raise LookupError(
            f"no backtest of {variant} at tau={tau:g}, seed {seed}, fold {fold} on {ticker} at {cost:g} bps in {wh}; "
            "available: " + ", ".join(f"{r[0]}/{r[1]:g}/seed {r[2]}/{r[3]}/fold {r[4]}" for r in have.iter_rows())
        )
    row = metrics.row(0, named=True)
    report.lines.append(
        f"{variant} tau={tau:g} {ticker} at {cost:g} bps, {row['first_date']} .. {row['last_date']} "
        f"({row['days']} days): "
        f"Sharpe {_fmt(row['sharpe'])} [95% CI {_fmt(row['sharpe_ci_low'])}, {_fmt(row['sharpe_ci_high'])}], "
        f"return {row['total_return']:+.1%}, max drawdown {row['max_drawdown']:.1%}, seed {row['seed']}, fold {fold}"
    )
    prov = wh.query(
        f"SELECT * FROM provenance WHERE variant = ? AND {TAU_SQL} AND seed = ? AND fold = ?",
        [variant, tau, seed, fold],
    )
    if prov.height == 0:
        raise LookupError(f"the backtest of {variant} at tau={tau:g} has no provenance rows; re-materialize backtests")
    return _links(settings, policy, prov, report)


def _targeting_chain(settings: Settings, policy: Policy, ticker: str, cost_bps: float | None) -> LineageReport:
    """A forecast policy's volatility-targeted backtest on ``ticker`` (``stages.backtests.materialize_targeting``)
    and its chain: its own files, read by their exact paths (a forecast's provenance has no tau to query by)."""
    wh, report = settings.warehouse, LineageReport()
    cost = settings.evaluate.report_cost_bps if cost_bps is None else cost_bps
    path, prov_path = wh.evaluation_file(TARGETING_BACKTESTS, policy), wh.evaluation_file(PROVENANCE, policy)
    if not path.exists() or not prov_path.exists():
        raise LookupError(
            f"no volatility-targeted backtest of {policy} in {wh}: materialize {policy.variant.name}_backtests "
            f"partition {policy.key}"
        )
    rows = exact.read_parquet(path).filter((pl.col("ticker") == ticker) & ((pl.col("cost_bps") - cost).abs() < 1e-9))
    if rows.height == 0:
        have = ", ".join(sorted(set(exact.read_parquet(path)["ticker"])))
        raise LookupError(f"no volatility-targeted backtest of {policy} on {ticker} at {cost:g} bps; tickers: {have}")
    row = rows.row(0, named=True)
    report.lines.append(
        f"{policy.variant.name} {policy.task.key} (volatility targeting, target {row['sigma_target']:.4f}/day) "
        f"{ticker} at {cost:g} bps, {row['first_date']} .. {row['last_date']} ({row['days']} days): "
        f"Sharpe {_fmt(row['sharpe'])} (Buy & Hold {_fmt(row['buy_and_hold_sharpe'])}), return "
        f"{row['total_return']:+.1%}, max drawdown {row['max_drawdown']:.1%}, mean weight {row['mean_weight']:.2f}, "
        f"seed {policy.seed}, fold {policy.fold.label}"
    )
    return _links(settings, policy, exact.read_parquet(prov_path), report)


def _links(settings: Settings, policy: Policy, prov: pl.DataFrame, report: LineageReport) -> LineageReport:
    """Every link of ``prov`` (a policy's provenance rows) re-hashed, link by link; the adapter-foundation pair, the
    token pins and the code versions."""
    wh, variant = settings.warehouse, policy.variant.name
    for link in LINK_ORDER:
        rows = prov.filter(pl.col("link") == link)
        if rows.height == 0:
            continue
        good = _check(rows, report, wh)
        status = "ok" if good == rows.height else f"{rows.height - good} PROBLEM(S)"
        if rows.height == 1:
            report.lines.append(f"  {link:<18} {rows['path'][0]}  sha256 {rows['sha256'][0][:16]}  {status}")
            continue
        summary = (
            rows.group_by("asset", "split")
            .agg(pl.len().alias("n"), pl.col("date").min().alias("first"), pl.col("date").max().alias("last"))
            .sort("asset", "split", nulls_last=True)
        )
        report.lines.append(f"  {link:<18} {rows.height} files, {good} hashes match: {status}")
        for s in summary.iter_rows(named=True):
            span = f"{s['first']} .. {s['last']}" if s["first"] else ""
            split = f" [{s['split']}]" if s["split"] else ""
            report.lines.append(f"      {s['asset']}{split}: {s['n']} {span}")
    if models([variant]):  # the adapter and the foundation on disk are one pair
        try:
            pinned = check_pair(wh, policy)
            report.lines.append(f"  pair               adapter fine-tuned from foundation sha256 {pinned[:16]}  ok")
        except (ValueError, FileNotFoundError) as exc:
            report.problems.append(f"pair: {exc}")
            report.lines.append("  pair               STALE (see below)")
    _check_token_pins(settings, prov, report)
    code = prov.filter(pl.col("link") == "code")
    if code.height:
        report.lines.append(
            "  code               " + ", ".join(f"{a}={v}" for a, v in code.select("asset", "sha256").iter_rows())
        )
    return report


def pooled_record(settings: Settings) -> pl.DataFrame:
    """The pooled walk-forward backtests the report's tables read (``reports/pooled/backtests.parquet``, the
    ``pooled_backtests`` asset, once checked against the evaluation files it was pooled from; the ``backtests``
    view itself with a single fold), read only: never recomputed here."""
    wh = settings.warehouse
    if len(settings.folds) == 1:  # the run's policies, each beside the predictions it was swept from
        frame = keep_run_policies(settings, wh.query("SELECT * FROM backtests"))
        check_backtests_current(settings, frame)
        return frame
    check_evaluation(wh, wh.pooled_dir / POOLED_PIN_FILE, POOLED_ASSET, run_keys_digest(settings))
    return exact.read_parquet(wh.pooled_dir / "backtests.parquet")


def trace_pooled(
    settings: Settings,
    pooled: pl.DataFrame,
    variant: str,
    tau: float,
    ticker: str,
    chains: list[Policy],
    cost_bps: float | None = None,
) -> LineageReport:
    """The Sharpe the report prints for ``variant`` at ``tau`` on ``ticker`` (the pooled record of every fold's
    test days, mean over seeds ± std, formatted by the report's own cell), each seed's pooled record checked
    against its folds' backtests (the same days, end to end), then every (fold, seed) chain behind it
    (``trace``, every file re-hashed)."""
    report = LineageReport()
    cost = settings.evaluate.report_cost_bps if cost_bps is None else cost_bps
    seeds = sorted({p.seed for p in chains})
    rows = runs_at(pooled.filter(pl.col("variant") == variant), tau, cost, ticker).sort("seed")
    others = sorted(set(rows["seed"].to_list()) - set(seeds))
    rows = rows.filter(pl.col("seed").is_in(seeds))  # the run's seeds only: an earlier run's are not traced
    rows = with_days_in_market(rows, settings.evaluate.min_days_in_market)  # the report's N/A, as it prints
    if rows.height == 0:
        also = f" (only of seed(s) {', '.join(map(str, others))}, not this run's)" if others else ""
        raise LookupError(
            f"the report has no pooled backtest of {variant} at tau={tau:g} on {ticker} at {cost:g} bps of this "
            f"run's seed(s) {', '.join(map(str, seeds))}{also}; materialize the report, or trace one fold with "
            "--fold/--seed"
        )
    folds = list(dict.fromkeys(p.fold for p in chains))
    report.lines.append(
        f"{variant} tau={tau:g} {ticker} at {cost:g} bps, the report's pooled record of {len(folds)} fold(s) x "
        f"{len(seeds)} seed(s): Sharpe {sharpe_cell(rows)} (as the report prints it)"
    )
    per_fold = []
    for policy in chains:
        chain = _chain(settings, policy, ticker, cost)
        per_fold.append((policy, chain))
        report.checked += chain.checked
        report.problems += [f"fold {policy.fold.name} seed {policy.seed}: {p}" for p in chain.problems]
    for row in rows.iter_rows(named=True):
        fold_rows = [_fold_row(settings, p, ticker, cost) for p, _ in per_fold if p.seed == row["seed"]]
        days = sum(r["days"] for r in fold_rows)
        span = (min(r["first_date"] for r in fold_rows), max(r["last_date"] for r in fold_rows))
        same = days == row["days"] and span == (row["first_date"], row["last_date"])
        report.lines.append(
            f"  seed {row['seed']}: pooled {row['first_date']} .. {row['last_date']} ({row['days']} days): Sharpe "
            f"{_fmt(row['sharpe'])}, return {row['total_return']:+.1%}; its {len(fold_rows)} folds' backtests "
            f"cover {span[0]} .. {span[1]} ({days} days): {'ok' if same else 'DIFFER'}"
        )
        if not same:
            report.problems.append(
                f"the pooled record of seed {row['seed']} is not its folds' days: it is older than the backtests; "
                "re-materialize pooled_backtests and the report"
            )
    for policy, chain in per_fold:
        report.lines.append(f"  -- fold {policy.fold.name}, seed {policy.seed} --")
        report.lines.extend(f"    {line}" for line in chain.lines)
    return _concluded(report, f"files checked in {len(per_fold)} chains")


def _fold_row(settings: Settings, policy: Policy, ticker: str, cost: float) -> dict:
    fold = policy.fold.label
    return settings.warehouse.query(
        f"SELECT days, first_date, last_date FROM backtests WHERE variant = ? AND {TAU_SQL} AND ticker = ? "
        "AND cost_bps = ? AND seed = ? AND fold = ?",
        [policy.variant.name, policy.task.tau, ticker, cost, policy.seed, fold],
    ).row(0, named=True)
