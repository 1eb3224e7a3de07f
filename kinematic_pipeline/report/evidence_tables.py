"""The evidence tables' layout: skill per outcome and variant, decisions per policy, the two decision rules.

Pure: frames in (``backtest.policy_frames``' per-policy and seed-mean frames, the metrics), formatted frames out;
``stages/evidence.py`` computes what goes in. No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.oracle import ORACLE, ORACLE_DISPLAY_NAME
from kinematic_pipeline.label_rules import at_tau
from kinematic_pipeline.report.tables import UNDEFINED, runs_at
from kinematic_pipeline.variants import ACTION_NAMES, VARIANT_NAMES, display_name

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
    if variant == ORACLE and metric in PROBABILISTIC:
        return "N/A (one-hot)"  # the informed policy decides; it states no probabilities
    return _cell(r.row(0, named=True), metric)


def information_table(skill: dict[str, pl.DataFrame], tau: float) -> pl.DataFrame:
    """One row per (outcome, metric), one column per variant (and the informed ceiling when present), at
    ``tau``. skill: {outcome name: ``seed_mean_skill_frame``}, in table order."""
    by_outcome = {o: f.filter(at_tau(tau)) if f.height else f for o, f in skill.items()}
    seen = {v for f in by_outcome.values() if f.height for v in f["variant"].to_list()}
    present = [v for v in (*VARIANT_NAMES, ORACLE) if v in seen]
    names = {v: ORACLE_DISPLAY_NAME if v == ORACLE else display_name(v) for v in present}
    out = [
        {"Outcome": outcome, "Metric": label} | {names[v]: _variant_cell(rows, v, metric) for v in present}
        for outcome, rows in by_outcome.items()
        for metric, label in INFORMATION_ROWS
    ]
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


def decision_rules_table(metrics: pl.DataFrame, margin: pl.DataFrame, tau: float, cost_bps: float) -> pl.DataFrame:
    """The paper's argmax next to the margin rule, per variant: mean over tickers and seeds."""
    argmax = runs_at(metrics, tau, cost_bps)
    second = runs_at(margin, tau, cost_bps) if margin.height else margin
    out = []
    for v in VARIANT_NAMES:
        a = argmax.filter(pl.col("variant") == v) if argmax.height else argmax
        m = second.filter(pl.col("variant") == v) if second.height else second
        if a.height == 0 and m.height == 0:
            continue
        row = {"Model": display_name(v)}
        for rule, rows in (("argmax", a), ("margin", m)):
            sharpe = rows["sharpe"].fill_nan(None).drop_nulls() if rows.height else pl.Series([], dtype=pl.Float64)
            row[f"Sharpe ({rule})"] = f"{sharpe.mean():.2f}" if sharpe.len() else UNDEFINED
            row[f"Return ({rule})"] = f"{100 * rows['total_return'].mean():.1f}%" if rows.height else "-"
            row[f"Action rate ({rule})"] = f"{100 * rows['action_rate'].mean():.1f}%" if rows.height else "-"
        row["m (validation)"] = (
            ", ".join(f"{x:.2f}" for x in m["margin"].unique().sort().to_list()) if m.height else "-"
        )
        out.append(row)
    return pl.DataFrame(out) if out else pl.DataFrame({"Model": []}, schema={"Model": pl.String})
