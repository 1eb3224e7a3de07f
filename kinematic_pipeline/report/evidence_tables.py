"""The evidence tables' layout: skill per outcome and variant, decisions per policy, the two decision rules.

Pure: frames in (``backtest.policy_frames``' per-policy and seed-mean frames, the metrics), formatted frames out;
``stages/evidence.py`` computes what goes in. No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.oracle import ORACLE, ORACLE_DISPLAY_NAME
from kinematic_pipeline.label_rules import at_tau
from kinematic_pipeline.report.tables import UNDEFINED, portfolio_cell, runs_at
from kinematic_pipeline.variants import ACTION_NAMES, ALL_VARIANT_NAMES, display_name
from kinematic_pipeline.variants import variant as lookup_variant

INFORMATION_ROWS = (  # (metric of skill_table, how the report names it)
    ("log_loss_skill", "Log-loss skill vs training base rates"),
    ("brier_skill", "Brier skill vs training base rates"),
    ("balanced_accuracy", "Balanced accuracy (argmax of p)"),
    ("macro_f1", "Macro-F1 (argmax of p)"),
    ("policy_balanced_accuracy", "Balanced accuracy (policy's actions)"),
    ("auc_buy", "AUC Buy vs rest"),
    ("auc_sell", "AUC Sell vs rest"),
)
PROBABILISTIC = ("log_loss_skill", "brier_skill")  # scores of probabilities, not of decisions
ORACLE_ELSEWHERE = "N/A (trained-on labels only)"  # the informed ceiling is scored on the trained-on labels


def _cell(row: dict, metric: str) -> str:
    """mean over seeds [95% interval of the seed mean], then "± std over seeds" when there are several."""
    value = row[metric]
    if value is None or not np.isfinite(value):
        return UNDEFINED
    text = f"{value:.3f} [{row[f'{metric}_ci_low']:.3f}, {row[f'{metric}_ci_high']:.3f}]"
    return text + (f" ± {row[f'{metric}_seed_std']:.3f}" if row["n_seeds"] > 1 else "")


def _variant_cell(rows: pl.DataFrame, variant: str, metric: str) -> str:
    r = rows.filter(pl.col("variant") == variant) if rows.height else rows
    if r.height == 0:
        return ORACLE_ELSEWHERE if variant == ORACLE else "-"
    if metric in PROBABILISTIC and (variant == ORACLE or not lookup_variant(variant).probabilistic):
        return "N/A (one-hot)"  # the informed policy and the rules decide; they state no probabilities
    return _cell(r.row(0, named=True), metric)


def information_table(
    skill: dict[str, pl.DataFrame], tau: float, data_seen: dict[str, str] | None = None
) -> pl.DataFrame:
    """One row per (outcome, metric), one column per variant (and the informed ceiling when present), at
    ``tau``; with ``data_seen`` ({variant: dates}) a last row says what each saw. skill: {outcome name:
    ``seed_mean_skill_frame``}, in table order."""
    by_outcome = {o: f.filter(at_tau(tau)) if f.height else f for o, f in skill.items()}
    seen = {v for f in by_outcome.values() if f.height for v in f["variant"].to_list()}
    present = [v for v in (*ALL_VARIANT_NAMES, ORACLE) if v in seen]
    names = {v: ORACLE_DISPLAY_NAME if v == ORACLE else display_name(v) for v in present}
    out = [
        {"Outcome": outcome, "Metric": label} | {names[v]: _variant_cell(rows, v, metric) for v in present}
        for outcome, rows in by_outcome.items()
        for metric, label in INFORMATION_ROWS
    ]
    if data_seen is not None:
        out.append(
            {"Outcome": "-", "Metric": "Data seen"}
            | {names[v]: data_seen.get(v, "the latent state (synthetic source)") for v in present}
        )
    return pl.DataFrame(
        out, schema={"Outcome": pl.String, "Metric": pl.String, **{names[v]: pl.String for v in present}}
    )


def decisions_table(decisions: pl.DataFrame, tau: float) -> pl.DataFrame:
    """One row per policy at ``tau``: base rates, the no-information action, the margin and the cause."""
    rows = decisions.filter(at_tau(tau)).sort("variant", "seed")
    return rows.select(
        pl.col("variant").map_elements(display_name, return_dtype=pl.String).alias("Model"),
        pl.col("seed").cast(pl.String).alias("Seed"),
        pl.format(
            "{} / {} / {}",
            *[pl.col(f"base_rate_{k}").round(2) for k in ("buy", "sell", "hold")],
        ).alias("Train B/S/H"),
        pl.col("no_information_action")
        .map_elements(lambda code: ACTION_NAMES[code], return_dtype=pl.String)
        .alias("No-info action"),
        pl.col("margin_q50").round(2).cast(pl.String).alias("Median ln(p_B/p_S)"),
        (100 * pl.col("share_margin_above_threshold")).round(1).cast(pl.String).alias("% above ln 5"),
        (100 * pl.col("share_differs_from_no_information")).round(1).cast(pl.String).alias("% differs from no-info"),
        pl.col("liquidation_cause").alias("Why it trades or liquidates"),
    )


def decision_rules_table(
    metrics: pl.DataFrame,
    margin: pl.DataFrame,
    tau: float,
    cost_bps: float,
    data_seen: dict[str, str] | None = None,
    portfolios: dict[str, pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """The paper's argmax next to the margin rule, per variant (models, rules, probes): the Sharpe of the
    equal-weight portfolio of the test tickers (``portfolios``: rule -> ``backtest.portfolio.portfolio_summary``
    by variant, seeds averaged; cash credited with rf) with its days in the market, and the return and action
    rate averaged over tickers and seeds; with ``data_seen``, what each variant saw."""
    ew = {
        rule: {r["variant"]: r for r in frame.iter_rows(named=True)} if frame.height else {}
        for rule, frame in (portfolios or {}).items()
    }
    argmax = runs_at(metrics, tau, cost_bps)
    second = runs_at(margin, tau, cost_bps) if margin.height else margin
    out = []
    for v in ALL_VARIANT_NAMES:
        a = argmax.filter(pl.col("variant") == v) if argmax.height else argmax
        m = second.filter(pl.col("variant") == v) if second.height else second
        if a.height == 0 and m.height == 0:
            continue
        row = {"Model": display_name(v)}
        for rule, rows in (("argmax", a), ("margin", m)):
            summary = ew.get(rule, {}).get(v)
            row[f"Sharpe ({rule})"] = portfolio_cell(summary) if rows.height else "-"
            row[f"Days in market ({rule})"] = (
                f"{summary['days_in_market']}/{summary['days']}" if summary is not None and rows.height else "-"
            )
            row[f"Return ({rule})"] = f"{100 * rows['total_return'].mean():.1f}%" if rows.height else "-"
            row[f"Action rate ({rule})"] = f"{100 * rows['action_rate'].mean():.1f}%" if rows.height else "-"
        row["m (validation)"] = (
            ", ".join(f"{x:.2f}" for x in m["margin"].unique().sort().to_list()) if m.height else "-"
        )
        if data_seen is not None:
            row["Data seen"] = data_seen.get(v, "-")
        out.append(row)
    return pl.DataFrame(out) if out else pl.DataFrame({"Model": []}, schema={"Model": pl.String})


def _over_seeds_text(values: pl.Series, fmt: str) -> str:
    """Mean over seeds (NaN ignored), with "± std" when several seeds: the signal table's cells."""
    v = values.cast(pl.Float64).fill_null(float("nan")).to_numpy()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return UNDEFINED
    text = format(float(v.mean()), fmt)
    return text + (f" ± {format(float(v.std(ddof=1)), fmt.lstrip('+'))}" if v.size > 1 else "")


SIGNAL_COLUMNS = (  # (column of signal_statistics, header, format)
    ("rank_ic", "Rank IC (mean)", "+.4f"),
    ("rank_icir", "ICIR (daily)", "+.3f"),
    ("rank_ic_t_nw", "Newey-West t", "+.2f"),
    ("rank_ic_positive", "Days IC > 0", ".1%"),
    ("ic", "IC (Pearson)", "+.4f"),
    ("auc_direction", "AUC dir (Buy vs Sell)", ".3f"),
)


def _variant_rows(stats: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    present = set(stats["variant"].to_list()) if stats.height else set()
    return [(v, stats.filter(pl.col("variant") == v)) for v in ALL_VARIANT_NAMES if v in present]


def signal_table(stats: pl.DataFrame, data_seen: dict[str, str], sample: str) -> pl.DataFrame:
    """Qlib's signal table, one row per (outcome, variant): the daily cross-sectional rank IC of the score
    s = p_buy - p_sell (weights undone) against the outcome's next-day return, its ICIR, Newey-West t and
    share of positive days, the Pearson IC, and the direction AUC; mean over seeds ± std. ``sample`` says
    which ticker-days were scored."""
    out = []
    for outcome in stats["outcome"].unique(maintain_order=True).to_list() if stats.height else []:
        for v, rows in _variant_rows(stats.filter(pl.col("outcome") == outcome)):
            out.append(
                {"Outcome": outcome, "Model": display_name(v), "Seeds": str(rows.height)}
                | {header: _over_seeds_text(rows[col], fmt) for col, header, fmt in SIGNAL_COLUMNS}
                | {"Ticker-days": f"{int(rows['ticker_days'].max()):,}", "Data seen": data_seen.get(v, "-")}
            )
    out.append({"Outcome": "Scored", "Model": sample})
    headers = ["Outcome", "Model", "Seeds", *(h for _, h, _ in SIGNAL_COLUMNS), "Ticker-days", "Data seen"]
    return pl.DataFrame(out, schema={h: pl.String for h in headers})


def time_series_ic_table(ts: pl.DataFrame, tickers: list[str]) -> pl.DataFrame:
    """One row per variant, one column per backtested ticker: the rank IC over time of the score against the
    next-day close-to-close return (mean over seeds ± std)."""
    out = []
    for v, rows in _variant_rows(ts) if ts.height else []:
        cells = {}
        for t in tickers:
            r = rows.filter(pl.col("ticker") == t)
            cells[t] = _over_seeds_text(r["rank_ic"], "+.3f") if r.height else "-"
        out.append({"Model": display_name(v)} | cells)
    return pl.DataFrame(out, schema={"Model": pl.String, **{t: pl.String for t in tickers}})


def label_artefact_table(stats: pl.DataFrame, label_source: str, residual: pl.DataFrame | None = None) -> pl.DataFrame:
    """How much of the trained-on label is known at decision time: per variant, the direction AUC and the rank
    IC against the trained-on labels' return next to the close-to-close return the backtest trades. With the
    paper's spline labels, r_spline = r_close + e_t - e_(t+1) and e_t (today's residual of the causal fit) is
    in the window; ``residual`` (``stages.evidence.residual_statistics``) adds a first row scored by e_t itself,
    the direct measure of that known part. The difference of the two AUCs is computed on different rows (those
    beyond tau by each label) and holds the one-day reversal too: it is named for what it is."""
    outcomes = stats["outcome"].unique(maintain_order=True).to_list() if stats.height else []
    if len(outcomes) < 2:
        return pl.DataFrame(
            {"Model": [f"the trained-on labels are close-to-close (label_source={label_source}): no artefact"]}
        )
    trained, close = outcomes[0], outcomes[1]
    named = (
        [("e_t: the causal fit's residual today (-c3/alpha^2 of token 63)", residual)]
        if residual is not None and residual.height
        else []
    )
    named += [(display_name(v), rows) for v, rows in _variant_rows(stats)]
    out = []
    for name, rows in named:
        a, b = rows.filter(pl.col("outcome") == trained), rows.filter(pl.col("outcome") == close)
        gap = a["auc_direction"].mean() - b["auc_direction"].mean() if a.height and b.height else float("nan")
        out.append(
            {
                "Model": name,
                f"AUC dir, {label_source} labels": _over_seeds_text(a["auc_direction"], ".3f"),
                "AUC dir, close-to-close": _over_seeds_text(b["auc_direction"], ".3f"),
                f"AUC on {label_source} - AUC on close labels": UNDEFINED if not np.isfinite(gap) else f"{gap:+.3f}",
                f"Rank IC, r_{label_source}": _over_seeds_text(a["rank_ic"], "+.4f"),
                "Rank IC, r_close": _over_seeds_text(b["rank_ic"], "+.4f"),
            }
        )
    return pl.DataFrame(out)


def data_seen_table(data_seen: dict[str, str]) -> pl.DataFrame:
    """The contamination table: per variant, the dates its fit, validation and normalization saw."""
    return pl.DataFrame(
        {"Model": [display_name(v) for v in data_seen], "Data seen": list(data_seen.values())},
        schema={"Model": pl.String, "Data seen": pl.String},
    )
