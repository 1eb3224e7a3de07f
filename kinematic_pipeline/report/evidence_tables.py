"""The evidence tables' layout: skill per outcome and variant, decisions per policy, the two decision rules.

Pure: frames in (``backtest.policy_frames``' per-policy and seed-mean frames, the metrics), formatted frames out;
``stages/evidence.py`` computes what goes in. No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.oracle import ORACLE, ORACLE_DISPLAY_NAME
from kinematic_pipeline.backtest.policy_frames import (
    BEYOND,
    BEYOND_TRIVIAL,
    PRIOR,
    PRIOR_DATA_SEEN,
    PRIOR_DISPLAY_NAME,
)
from kinematic_pipeline.backtest.skill import effective_block_days
from kinematic_pipeline.backtest.volatility_reference import REFERENCE, REFERENCE_DATA_SEEN, REFERENCE_DISPLAY_NAME
from kinematic_pipeline.report.tables import UNDEFINED, portfolio_cell, runs_at
from kinematic_pipeline.tasks.actions import ACTION_NAMES, BUY, SELL, class_weight_vector
from kinematic_pipeline.tasks.buy_sell_hold import at_tau
from kinematic_pipeline.variants import ALL_VARIANT_NAMES, TRIVIAL_PROBE, display_name
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
# the information table's row of each model's skill beyond the trailing-volatility reference, when it was scored
BEYOND_ROW = (BEYOND, "Log-loss skill beyond trailing vol20 (paired: the same ticker-days)")
# and beyond the trivial probe (LR on ret1 and vol20), when it was scored: the stricter zero, so the table leads with it
BEYOND_TRIVIAL_ROW = (BEYOND_TRIVIAL, "Log-loss skill beyond the trivial probe (paired: the same ticker-days)")
PROBABILISTIC = ("log_loss_skill", "brier_skill", BEYOND, BEYOND_TRIVIAL)  # scores of probabilities, not decisions
ORACLE_ELSEWHERE = "N/A (trained-on labels only)"  # the informed ceiling is scored on the trained-on labels
IS_REFERENCE = "0 (the reference)"  # the reference's own skill beyond itself
CONSTANT_SCORE = "N/A (score ≡ 0)"  # the reference's p_buy = p_sell: its signal score ranks nothing
CONTROLS = (ORACLE, REFERENCE, PRIOR)  # rows beside the variants: no registered variant behind them


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
    if (variant, metric) in ((REFERENCE, BEYOND), (TRIVIAL_PROBE, BEYOND_TRIVIAL)):
        return IS_REFERENCE
    if metric not in r.columns:
        return "-"
    if (variant in CONTROLS and metric == BEYOND_TRIVIAL) or (variant == PRIOR and metric == BEYOND):
        return "-"
    if metric in PROBABILISTIC and variant not in CONTROLS and not lookup_variant(variant).probabilistic:
        return "N/A (one-hot)"  # the rules decide; they state no probabilities
    if metric in PROBABILISTIC and variant == ORACLE:
        return "N/A (one-hot)"  # the informed policy decides too
    return _cell(r.row(0, named=True), metric)


def _display(variant: str) -> str:
    names = {ORACLE: ORACLE_DISPLAY_NAME, REFERENCE: REFERENCE_DISPLAY_NAME, PRIOR: PRIOR_DISPLAY_NAME}
    return names.get(variant) or display_name(variant)


def information_table(
    skill: dict[str, pl.DataFrame],
    tau: float,
    data_seen: dict[str, str] | None = None,
    block_days: int | None = None,
) -> pl.DataFrame:
    """One row per (outcome, metric), one column per variant (then the trailing-volatility reference and the
    informed ceiling when present), at ``tau``; led, where the trivial probe was scored, by each model's log-loss
    skill beyond it (``BEYOND_TRIVIAL_ROW``); with the reference, a row per outcome of each model's log-loss skill
    beyond it (``BEYOND_ROW``); with ``block_days`` a row states each column's interval (95%, the bootstrap's block
    and the test days resampled); with ``data_seen`` ({variant: dates}) a last row says what each saw. skill:
    {outcome name: ``seed_mean_skill_frame``, with ``skill_beyond_reference_frame``'s columns when scored}."""
    by_outcome = {o: f.filter(at_tau(tau)) if f.height else f for o, f in skill.items()}
    seen = {v for f in by_outcome.values() if f.height for v in f["variant"].to_list()}
    present = [v for v in (*ALL_VARIANT_NAMES, REFERENCE, PRIOR, ORACLE) if v in seen]
    names = {v: _display(v) for v in present}
    beyond = any(BEYOND in f.columns for f in by_outcome.values())
    trivial = any(BEYOND_TRIVIAL in f.columns for f in by_outcome.values())
    metrics = (*((BEYOND_TRIVIAL_ROW,) if trivial else ()), *INFORMATION_ROWS, *((BEYOND_ROW,) if beyond else ()))
    out = [
        {"Outcome": outcome, "Metric": label} | {names[v]: _variant_cell(rows, v, metric) for v in present}
        for outcome, rows in by_outcome.items()
        for metric, label in metrics
    ]
    if block_days is not None:
        first = next(iter(by_outcome.values()), pl.DataFrame())
        days = {r["variant"]: r["n_days"] for r in first.iter_rows(named=True)} if first.height else {}
        out.append(
            {"Outcome": "-", "Metric": "Intervals"}
            | {names[v]: _intervals_cell(block_days, days.get(v)) for v in present}
        )
    if data_seen is not None:
        fallback = {REFERENCE: REFERENCE_DATA_SEEN, PRIOR: PRIOR_DATA_SEEN}
        out.append(
            {"Outcome": "-", "Metric": "Data seen"}
            | {names[v]: data_seen.get(v, fallback.get(v, "the latent state (synthetic source)")) for v in present}
        )
    return pl.DataFrame(
        out, schema={"Outcome": pl.String, "Metric": pl.String, **{names[v]: pl.String for v in present}}
    )


def decisions_table(decisions: pl.DataFrame, tau: float, class_weights) -> pl.DataFrame:
    """One row per policy at ``tau``: base rates, the no-information action, the margin and the cause; the margin's
    threshold printed as the run's ln(w_sell/w_buy) (``class_weights``: [Buy, Sell, Hold])."""
    rows = decisions.filter(at_tau(tau)).sort("variant", "seed")
    w = class_weight_vector(class_weights)
    above = f"% above ln(w_sell/w_buy) = {np.log(w[SELL] / w[BUY]):.2f}"
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
        (100 * pl.col("share_margin_above_threshold")).round(1).cast(pl.String).alias(above),
        (100 * pl.col("share_differs_from_no_information")).round(1).cast(pl.String).alias("% differs from no-info"),
        pl.col("liquidation_cause").alias("Why it trades or liquidates"),
    )


def decision_rules_table(
    records: dict[str, pl.DataFrame],
    tau: float,
    cost_bps: float,
    data_seen: dict[str, str] | None = None,
    portfolios: dict[str, pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """Every decision rule side by side, per variant (models, rules, probes): ``records`` (rule -> its pooled
    metrics: the paper's argmax, the calibrated argmax, the margin rule, in that order; the margin rule's with its m),
    the Sharpe of the equal-weight portfolio of the test tickers (``portfolios``: rule ->
    ``backtest.portfolio.portfolio_summary`` by variant, seeds averaged; cash credited with rf) with its days in the
    market, and the return and action rate averaged over tickers and seeds; with ``data_seen``, what each variant
    saw."""
    ew = {
        rule: {r["variant"]: r for r in frame.iter_rows(named=True)} if frame.height else {}
        for rule, frame in (portfolios or {}).items()
    }
    at = {rule: runs_at(frame, tau, cost_bps) if frame.height else frame for rule, frame in records.items()}
    out = []
    for v in ALL_VARIANT_NAMES:
        own = {rule: frame.filter(pl.col("variant") == v) if frame.height else frame for rule, frame in at.items()}
        if all(rows.height == 0 for rows in own.values()):
            continue
        m = own.get("margin", pl.DataFrame())
        row = {"Model": display_name(v)}
        for rule, rows in own.items():
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


def _variant_rows(stats: pl.DataFrame, reference: bool = False) -> list[tuple[str, pl.DataFrame]]:
    present = set(stats["variant"].to_list()) if stats.height else set()
    order = (*ALL_VARIANT_NAMES, REFERENCE) if reference else ALL_VARIANT_NAMES
    return [(v, stats.filter(pl.col("variant") == v)) for v in order if v in present]


def signal_table(stats: pl.DataFrame, data_seen: dict[str, str], sample: str) -> pl.DataFrame:
    """Qlib's signal table, one row per (outcome, variant): the daily cross-sectional rank IC of the score
    s = p_buy - p_sell (weights undone) against the outcome's next-day return, its ICIR, Newey-West t and
    share of positive days, the Pearson IC, and the direction AUC; mean over seeds ± std. ``sample`` says
    which ticker-days were scored. The trailing-volatility reference's row (when in ``stats``) says why it has no
    IC: its score is 0 on every row."""
    out = []
    for outcome in stats["outcome"].unique(maintain_order=True).to_list() if stats.height else []:
        for v, rows in _variant_rows(stats.filter(pl.col("outcome") == outcome), reference=True):
            cells = {header: _over_seeds_text(rows[col], fmt) for col, header, fmt in SIGNAL_COLUMNS}
            if v == REFERENCE and cells["Rank IC (mean)"] == UNDEFINED:  # no day ranked: the score is constant
                cells = dict.fromkeys(cells, CONSTANT_SCORE)  # its direction AUC too: ties only, 0.5 by construction
            out.append(
                {"Outcome": outcome, "Model": _display(v), "Seeds": str(rows.height)}
                | cells
                | {
                    "Ticker-days": f"{int(rows['ticker_days'].max()):,}",
                    "Data seen": data_seen.get(v, REFERENCE_DATA_SEEN if v == REFERENCE else "-"),
                }
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


def _intervals_cell(block_days: int, n_days: int | None) -> str:
    """How a variant's intervals were drawn: its blocks of its test days (``skill.effective_block_days``: a short
    period's block is cut to a quarter of its days, and says so)."""
    if n_days is None:
        return f"95%, {block_days}-day blocks of ? test days"
    used = effective_block_days(block_days, n_days)
    cut = "" if used == block_days else f" (the {block_days}-day block cut to a quarter of the days)"
    return f"95%, {used}-day blocks of {n_days} test days{cut}"
