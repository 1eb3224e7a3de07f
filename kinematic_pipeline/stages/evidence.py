"""Does a tokenization carry tradable information? The evidence the report adds to the paper's tables.

- ``information``: log-loss and Brier skill against the training labels' base rates (0 = no information),
  balanced accuracy and macro-F1 of the argmax of the de-weighted probabilities, balanced accuracy of the
  policy's own actions, and the AUC of Buy-vs-rest and Sell-vs-rest, the variants side by side
  (``backtest.skill``, ``backtest.skill_seeds``, ``backtest.evidence``). A cell is the mean over seeds, the
  95% day-bootstrap interval of that mean (one day resample shared by the seeds) and the std over seeds.
  Every metric is shown twice, once per outcome: the trained-on labels (the paper's spline labels by
  default, whose return r_spline = r_close + e_t - e_{t+1} has a part e_t known at decision time) and the
  close-to-close labels of r_close, what the backtest trades, each against the training base rates of its
  own outcome; with ``tokenize.label_source = "close"`` the two coincide and one set is shown. On synthetic
  data also the informed policy that acts on the true latent drift (``backtest.oracle``): the ceiling, on
  the trained-on labels only.
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

from kinematic_pipeline.backtest.evidence import decision_frame, seed_mean_skill_frame
from kinematic_pipeline.backtest.oracle import ORACLE, ORACLE_DISPLAY_NAME, oracle_predictions
from kinematic_pipeline.backtest.skill import base_rates
from kinematic_pipeline.config import Settings
from kinematic_pipeline.label_rules import labels_from_returns
from kinematic_pipeline.report.tables import UNDEFINED, runs_at
from kinematic_pipeline.sources import make_source
from kinematic_pipeline.storage import LABELS, MARGIN_BACKTESTS, PREDICTIONS, RAW_OHLCV, Warehouse
from kinematic_pipeline.variants import ACTION_NAMES, UNKNOWN_LABEL, VARIANT_NAMES, display_name
from kinematic_pipeline.windows import tau_column

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
TRAINED, CLOSE = "trained", "close"  # the outcomes: the trained-on label columns; labels of r_close
CLOSE_LABEL = "label_close"  # the column of close-to-close labels joined onto the predictions
ORACLE_ELSEWHERE = "N/A (trained-on labels only)"  # the informed ceiling is scored on the trained-on labels


def outcome_names(label_source: str) -> dict[str, str]:
    """{outcome: how the information table names it}, in table order; one outcome when the trained-on labels
    already are the close-to-close ones."""
    if label_source == "close":
        return {TRAINED: "close-to-close (trained on and traded: one set, the two coincide)"}
    return {TRAINED: f"trained-on labels ({label_source})", CLOSE: "close-to-close (what the backtest trades)"}


def close_labels(r_close, tau: float) -> np.ndarray:
    """Close-to-close labels of next-day returns (``label_rules.labels_from_returns``; null/NaN -> -1)."""
    r = pl.Series(r_close, dtype=pl.Float64).fill_null(float("nan")).to_numpy()
    return labels_from_returns(r, tau)


def base_rates_by_outcome(labels: pl.DataFrame, taus) -> dict[str, dict[float, np.ndarray]]:
    """{outcome: {tau: Buy/Sell/Hold shares}} of labels shards' rows: the trained-on label columns, and
    the close-to-close labels of their ``r_close``."""
    return {
        TRAINED: {t: base_rates(labels[tau_column(t)].to_numpy()) for t in taus},
        CLOSE: {t: base_rates(close_labels(labels["r_close"], t)) for t in taus},
    }


def train_base_rates(settings: Settings) -> dict[str, dict[float, np.ndarray]]:
    """``base_rates_by_outcome`` of the labels on training-period days (on or before the cut), per tau."""
    wh = Warehouse(settings.warehouse)
    days = wh.shard_days(LABELS, until=settings.data.train_end)
    if not days:
        raise FileNotFoundError(f"no labels on or before {settings.data.train_end}: materialize labels first")
    columns = [*(tau_column(t) for t in settings.tokenize.taus), "r_close"]
    labels = pl.read_parquet([wh.shard(LABELS, d) for d in days], columns=columns)
    return base_rates_by_outcome(labels, settings.tokenize.taus)


def with_close_labels(predictions: pl.DataFrame, returns: pl.DataFrame) -> pl.DataFrame:
    """``predictions`` plus CLOSE_LABEL: the close-to-close label, at the row's tau, of the ``r_close`` of its
    (ticker, date) in ``returns`` (ticker, date, r_close: the labels shards'); -1 without one."""
    joined = predictions.join(
        returns.select("ticker", "date", "r_close"), on=["ticker", "date"], how="left", validate="m:1"
    )
    labels = np.full(joined.height, UNKNOWN_LABEL, dtype=np.int8)
    tau = joined["tau"].to_numpy()
    for t in np.unique(tau):
        rows = tau == t
        labels[rows] = close_labels(joined["r_close"].filter(pl.Series(rows)), float(t))
    return joined.drop("r_close").with_columns(pl.Series(CLOSE_LABEL, labels, dtype=pl.Int8))


def prediction_day_returns(settings: Settings, predictions: pl.DataFrame) -> pl.DataFrame:
    """ticker, date, r_close from the labels shards of the prediction days."""
    wh, days = Warehouse(settings.warehouse), sorted(predictions["date"].unique().to_list())
    return pl.read_parquet([wh.shard(LABELS, d) for d in days], columns=["ticker", "date", "r_close"])


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
    at_tau = {o: f.filter((pl.col("tau") - tau).abs() < 1e-12) if f.height else f for o, f in skill.items()}
    seen = {v for f in at_tau.values() if f.height for v in f["variant"].to_list()}
    present = [v for v in (*VARIANT_NAMES, ORACLE) if v in seen]
    names = {v: ORACLE_DISPLAY_NAME if v == ORACLE else display_name(v) for v in present}
    out = [
        {"Outcome": outcome, "Metric": label} | {names[v]: _variant_cell(rows, v, metric) for v in present}
        for outcome, rows in at_tau.items()
        for metric, label in INFORMATION_ROWS
    ]
    return pl.DataFrame(
        out, schema={"Outcome": pl.String, "Metric": pl.String, **{names[v]: pl.String for v in present}}
    )


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


def information_skill(settings: Settings, at_tau: pl.DataFrame, rates: dict, tau: float) -> dict[str, pl.DataFrame]:
    """{outcome name: ``seed_mean_skill_frame``} of the test predictions at ``tau``: on the trained-on labels
    (with the informed ceiling on synthetic data) and, unless they coincide, on close-to-close labels."""
    ev, weights, names = settings.evaluate, settings.train.class_weights, outcome_names(settings.tokenize.label_source)
    kw = {"n_boot": ev.skill_bootstrap_resamples, "boot_seed": ev.bootstrap_seed}
    oracle = oracle_test_predictions(settings, at_tau, tau) if at_tau.height else None
    scored = at_tau if oracle is None else pl.concat([at_tau, oracle.cast(at_tau.schema)], how="vertical")
    out = {names[TRAINED]: seed_mean_skill_frame(scored, rates[TRAINED], weights, **kw)}
    if CLOSE in names and at_tau.height:
        close = with_close_labels(at_tau, prediction_day_returns(settings, at_tau))
        out[names[CLOSE]] = seed_mean_skill_frame(close, rates[CLOSE], weights, label_column=CLOSE_LABEL, **kw)
    return out


def evidence_tables(settings: Settings, metrics: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The three evidence tables at the report's tau and cost (see the module docstring)."""
    ev, tau = settings.evaluate, settings.evaluate.report_tau
    predictions = test_predictions(settings)
    rates = train_base_rates(settings)
    at_tau = predictions.filter((pl.col("tau") - tau).abs() < 1e-12)
    decisions = decision_frame(predictions, rates[TRAINED], settings.train.class_weights)
    return {
        "information": information_table(information_skill(settings, at_tau, rates, tau), tau),
        "decisions": decisions_table(decisions, tau),
        "decision_rules": decision_rules_table(metrics, margin_metrics(settings), tau, ev.report_cost_bps),
    }
