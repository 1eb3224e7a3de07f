"""Does a tokenization carry tradable information? The evidence the report adds to the paper's tables.

- ``information``: log-loss and Brier skill against the training labels' base rates (0 = no information),
  balanced accuracy, macro-F1 and the AUC of Buy-vs-rest and Sell-vs-rest, each with a bootstrap interval
  over test days, the variants side by side (``backtest.skill``, ``backtest.evidence``); on synthetic data
  also the informed policy that acts on the true latent drift (``backtest.oracle``): the ceiling.
- ``decisions``: per policy, why it trades or liquidates under the paper's weighted argmax
  (``backtest.decisions``): base rates, the no-information action, the Buy/Sell margin against ln 5.
- ``decision_rules``: the paper's argmax next to the second rule (undo the weights, trade beyond a margin m
  chosen on validation days), as backtested by ``stages.evaluate``.

Everything reads shards of the warehouse; training statistics come from days on or before the cut only.
No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.evidence import decision_frame, skill_frame
from kinematic_pipeline.backtest.oracle import ORACLE, ORACLE_DISPLAY_NAME, oracle_predictions
from kinematic_pipeline.backtest.skill import base_rates
from kinematic_pipeline.config import Settings
from kinematic_pipeline.report.tables import UNDEFINED, runs_at
from kinematic_pipeline.sources import make_source
from kinematic_pipeline.storage import LABELS, MARGIN_BACKTESTS, PREDICTIONS, RAW_OHLCV, Warehouse
from kinematic_pipeline.variants import ACTION_NAMES, VARIANT_NAMES, display_name
from kinematic_pipeline.windows import tau_column

INFORMATION_ROWS = (  # (metric of skill_table, how the report names it)
    ("log_loss_skill", "Log-loss skill vs base rates"),
    ("brier_skill", "Brier skill vs base rates"),
    ("balanced_accuracy", "Balanced accuracy"),
    ("macro_f1", "Macro-F1"),
    ("auc_buy", "AUC Buy vs rest"),
    ("auc_sell", "AUC Sell vs rest"),
)


PROBABILISTIC = ("log_loss_skill", "brier_skill")  # scores of probabilities, not of decisions


def train_base_rates(settings: Settings) -> dict[float, np.ndarray]:
    """Buy/Sell/Hold shares of the known labels on training-period days (on or before the cut), per tau."""
    wh = Warehouse(settings.warehouse)
    days = wh.shard_days(LABELS, until=settings.data.train_end)
    if not days:
        raise FileNotFoundError(f"no labels on or before {settings.data.train_end}: materialize labels first")
    columns = [tau_column(t) for t in settings.tokenize.taus]
    labels = pl.read_parquet([wh.shard(LABELS, d) for d in days], columns=columns)
    return {t: base_rates(labels[tau_column(t)].to_numpy()) for t in settings.tokenize.taus}


def test_predictions(settings: Settings) -> pl.DataFrame:
    """Every policy's test-period predictions (the predictions view's shards)."""
    folder = Warehouse(settings.warehouse).root / PREDICTIONS
    files = sorted(folder.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no predictions under {folder}: materialize predictions first")
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


def oracle_test_predictions(settings: Settings, predictions: pl.DataFrame, tau: float) -> pl.DataFrame | None:
    """The informed policy on the test tickers and days, for the synthetic source (None for real data):
    it knows the latent state the synthetic bars were drawn from, which no tokenization of the bars can."""
    if settings.data.source != "synthetic":
        return None
    wh, days = Warehouse(settings.warehouse), sorted(predictions["date"].unique().to_list())
    tickers = predictions["ticker"].unique().to_list()
    bars = pl.read_parquet([wh.shard(RAW_OHLCV, d) for d in days], columns=["ticker", "date", "close"])
    labels = pl.read_parquet([wh.shard(LABELS, d) for d in days], columns=["ticker", "date", tau_column(tau)])
    truth = make_source(settings).ground_truth().filter(pl.col("ticker").is_in(tickers))
    # The latent drift that matches the labels: the spline labels follow positions, close labels closes.
    drift = "velocity" if settings.tokenize.label_source == "spline" else "close"
    return oracle_predictions(
        truth,
        bars.filter(pl.col("ticker").is_in(tickers)),
        tau,
        labels=labels.rename({tau_column(tau): "label"}),
        days=days,
        drift=drift,
    )


def _cell(values: pl.Series, low: pl.Series, high: pl.Series) -> str:
    """Mean over seeds [mean interval]; "± std" when there are several seeds."""
    if values.drop_nans().drop_nulls().len() == 0:
        return UNDEFINED
    text = f"{values.mean():.3f} [{low.mean():.3f}, {high.mean():.3f}]"
    return text + (f" ± {values.std():.3f}" if values.len() > 1 else "")


def information_table(skill: pl.DataFrame, tau: float) -> pl.DataFrame:
    """One row per metric, one column per variant (and the informed ceiling when present), at ``tau``."""
    rows = skill.filter((pl.col("tau") - tau).abs() < 1e-12)
    present = [v for v in (*VARIANT_NAMES, ORACLE) if v in set(rows["variant"].to_list())]
    names = {v: ORACLE_DISPLAY_NAME if v == ORACLE else display_name(v) for v in present}
    out = []
    for metric, label in INFORMATION_ROWS:
        row = {"Metric": label}
        for v in present:
            r = rows.filter(pl.col("variant") == v)
            if v == ORACLE and metric in PROBABILISTIC:
                row[names[v]] = "N/A (one-hot)"  # the informed policy decides; it states no probabilities
            else:
                row[names[v]] = _cell(r[metric], r[f"{metric}_ci_low"], r[f"{metric}_ci_high"])
        out.append(row)
    return pl.DataFrame(out, schema={"Metric": pl.String, **{names[v]: pl.String for v in present}})


def decisions_table(decisions: pl.DataFrame, tau: float) -> pl.DataFrame:
    """One row per policy at ``tau``: base rates, the no-information action, the margin and the cause."""
    rows = decisions.filter((pl.col("tau") - tau).abs() < 1e-12).sort("variant", "seed")
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


def margin_metrics(settings: Settings) -> pl.DataFrame:
    files = sorted((Warehouse(settings.warehouse).root / MARGIN_BACKTESTS).glob("*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed") if files else pl.DataFrame()


def evidence_tables(settings: Settings, metrics: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The three evidence tables at the report's tau and cost (see the module docstring)."""
    ev, tau = settings.evaluate, settings.evaluate.report_tau
    weights = settings.train.class_weights
    predictions = test_predictions(settings)
    rates = train_base_rates(settings)
    at_tau = predictions.filter((pl.col("tau") - tau).abs() < 1e-12)
    oracle = oracle_test_predictions(settings, at_tau, tau) if at_tau.height else None
    scored = at_tau if oracle is None else pl.concat([at_tau, oracle.cast(at_tau.schema)], how="vertical")
    skill = skill_frame(
        scored,
        rates,
        weights,
        n_boot=ev.skill_bootstrap_resamples,
        boot_seed=ev.bootstrap_seed,
    )
    decisions = decision_frame(predictions, rates, weights)
    return {
        "information": information_table(skill, tau),
        "decisions": decisions_table(decisions, tau),
        "decision_rules": decision_rules_table(metrics, margin_metrics(settings), tau, ev.report_cost_bps),
    }
