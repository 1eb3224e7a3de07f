"""Walk back from a reported metric: backtest -> predictions -> adapter -> foundation -> token shards -> raw bars.

Reads the ``backtests`` and ``provenance`` views of the catalog and re-hashes every file the chain names,
so each link is checked against the bytes on disk (no dagster here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.storage import file_sha256, query

LINK_ORDER = (
    "backtests",
    "equity_curves",
    "trades",
    "margin_backtests",
    "predictions",
    "predictions_validation",
    "predictions_inputs",
    "adapter",
    "foundation",
    "finetune_lineage",
    "pretrain_lineage",
    "window_store",
    "training_shard",
    "test_shard",
    "raw_ohlcv",
)


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


def _check(rows: pl.DataFrame, report: LineageReport) -> int:
    """Re-hash each file; record missing files and hash mismatches. Returns the number that match."""
    good = 0
    for path, sha, date in rows.select("path", "sha256", "date").iter_rows():
        report.checked += 1
        where = f"{path}" + (f" (partition {date})" if date else "")
        if not Path(path).exists():
            report.problems.append(f"missing: {where}")
        elif file_sha256(Path(path)) != sha:
            report.problems.append(f"hash mismatch: {where} is not the file the backtest used")
        else:
            good += 1
    return good


def trace(
    settings: Settings,
    variant: str,
    tau: float,
    ticker: str,
    cost_bps: float | None = None,
    seed: int | None = None,
) -> LineageReport:
    """The chain behind the backtest of ``variant`` (trained with ``seed``; default: the first of
    ``train.seeds``) at ``tau`` on ``ticker``, every file re-hashed."""
    wh, report = settings.warehouse, LineageReport()
    cost = settings.evaluate.report_cost_bps if cost_bps is None else cost_bps
    seed = settings.train.seeds[0] if seed is None else seed
    metrics = query(
        wh,
        "SELECT * FROM backtests WHERE variant = ? AND abs(tau - ?) < 1e-12 AND ticker = ? AND cost_bps = ? "
        "AND seed = ?",
        [variant, tau, ticker, cost, seed],
    )
    if metrics.height == 0:
        have = query(wh, "SELECT DISTINCT variant, tau, seed, ticker FROM backtests WHERE tau IS NOT NULL ORDER BY ALL")
        raise LookupError(
            f"no backtest of {variant} at tau={tau:g}, seed {seed} on {ticker} at {cost:g} bps in {wh}; available: "
            + ", ".join(f"{r[0]}/{r[1]:g}/seed {r[2]}/{r[3]}" for r in have.iter_rows())
        )
    row = metrics.row(0, named=True)
    report.lines.append(
        f"{variant} tau={tau:g} {ticker} at {cost:g} bps, {row['first_date']} .. {row['last_date']} ({row['days']} days): "
        f"Sharpe {_fmt(row['sharpe'])} [95% CI {_fmt(row['sharpe_ci_low'])}, {_fmt(row['sharpe_ci_high'])}], "
        f"return {row['total_return']:+.1%}, max drawdown {row['max_drawdown']:.1%}, seed {row['seed']}"
    )
    prov = query(
        wh, "SELECT * FROM provenance WHERE variant = ? AND abs(tau - ?) < 1e-12 AND seed = ?", [variant, tau, seed]
    )
    if prov.height == 0:
        raise LookupError(f"the backtest of {variant} at tau={tau:g} has no provenance rows; re-materialize backtests")
    for link in LINK_ORDER:
        rows = prov.filter(pl.col("link") == link)
        if rows.height == 0:
            continue
        good = _check(rows, report)
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
    code = prov.filter(pl.col("link") == "code")
    if code.height:
        report.lines.append(
            "  code               " + ", ".join(f"{a}={v}" for a, v in code.select("asset", "sha256").iter_rows())
        )
    verdict = "every link resolves to a file with the recorded hash" if report.ok else "BROKEN LINKS:"
    report.lines.append(f"{report.checked} files checked: {verdict}")
    report.lines.extend(f"  {p}" for p in report.problems[:20])
    return report
