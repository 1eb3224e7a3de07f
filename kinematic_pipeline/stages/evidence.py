"""Does a tokenization carry tradable information? The evidence the report adds to the paper's tables.

- ``information``: log-loss and Brier skill against the training labels' base rates (0 = no information),
  balanced accuracy and macro-F1 of the argmax of the de-weighted probabilities, balanced accuracy of the
  policy's own actions, and the AUC of Buy-vs-rest and Sell-vs-rest, the variants side by side
  (``backtest.skill``, ``backtest.skill_seeds``, ``backtest.policy_frames``). A cell is the mean over seeds, the
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
  chosen on validation days), as backtested by ``stages.backtests``.

Everything reads shards of the warehouse; training statistics come from days on or before the cut only.
No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.oracle import oracle_predictions
from kinematic_pipeline.backtest.policy_frames import decision_frame, seed_mean_skill_frame
from kinematic_pipeline.backtest.skill import base_rates
from kinematic_pipeline.config import Settings
from kinematic_pipeline.label_rules import at_tau, labels_from_returns, tau_column
from kinematic_pipeline.report import evidence_tables as evidence_tables_report
from kinematic_pipeline.sources import make_source
from kinematic_pipeline.variants import UNKNOWN_LABEL
from kinematic_pipeline.warehouse import LABELS, MARGIN_BACKTESTS, PREDICTIONS, RAW_OHLCV

TRAINED, CLOSE = "trained", "close"  # the outcomes: the trained-on label columns; labels of r_close
CLOSE_LABEL = "label_close"  # the column of close-to-close labels joined onto the predictions


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
    wh = settings.warehouse
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
    wh, days = settings.warehouse, sorted(predictions["date"].unique().to_list())
    return pl.read_parquet([wh.shard(LABELS, d) for d in days], columns=["ticker", "date", "r_close"])


def read_view(settings: Settings, view: str) -> pl.DataFrame:
    """Every row of an asset's catalog view; FileNotFoundError naming the asset when it has none yet."""
    frame = settings.warehouse.read_view(view) if settings.warehouse.catalog_path.exists() else pl.DataFrame()
    if frame.height == 0:
        raise FileNotFoundError(f"no {view} rows in {settings.warehouse.catalog_path}: materialize {view} first")
    return frame


def oracle_test_predictions(settings: Settings, predictions: pl.DataFrame, tau: float) -> pl.DataFrame | None:
    """The informed policy on the test tickers and days, for the synthetic source (None for real data):
    it knows the latent state the synthetic bars were drawn from, which no tokenization of the bars can."""
    if settings.data.source != "synthetic":
        return None
    wh, days = settings.warehouse, sorted(predictions["date"].unique().to_list())
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


def margin_metrics(settings: Settings) -> pl.DataFrame:
    """The margin rule's backtests (view ``margin_backtests``); an empty frame before any exists."""
    try:
        return read_view(settings, MARGIN_BACKTESTS)
    except FileNotFoundError:
        return pl.DataFrame()


def information_skill(
    settings: Settings, report_rows: pl.DataFrame, rates: dict, tau: float
) -> dict[str, pl.DataFrame]:
    """{outcome name: ``seed_mean_skill_frame``} of the test predictions at ``tau``: on the trained-on labels
    (with the informed ceiling on synthetic data) and, unless they coincide, on close-to-close labels."""
    ev, weights, names = settings.evaluate, settings.train.class_weights, outcome_names(settings.tokenize.label_source)
    kw = {"n_boot": ev.skill_bootstrap_resamples, "boot_seed": ev.bootstrap_seed}
    oracle = oracle_test_predictions(settings, report_rows, tau) if report_rows.height else None
    scored = (
        report_rows if oracle is None else pl.concat([report_rows, oracle.cast(report_rows.schema)], how="vertical")
    )
    out = {names[TRAINED]: seed_mean_skill_frame(scored, rates[TRAINED], weights, **kw)}
    if CLOSE in names and report_rows.height:
        close = with_close_labels(report_rows, prediction_day_returns(settings, report_rows))
        out[names[CLOSE]] = seed_mean_skill_frame(close, rates[CLOSE], weights, label_column=CLOSE_LABEL, **kw)
    return out


def evidence_tables(settings: Settings, metrics: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The three evidence tables at the report's tau and cost (see the module docstring)."""
    ev, tau = settings.evaluate, settings.evaluate.report_tau
    predictions = read_view(settings, PREDICTIONS)
    rates = train_base_rates(settings)
    report_rows = predictions.filter(at_tau(tau))
    decisions = decision_frame(predictions, rates[TRAINED], settings.train.class_weights)
    return {
        "information": evidence_tables_report.information_table(
            information_skill(settings, report_rows, rates, tau), tau
        ),
        "decisions": evidence_tables_report.decisions_table(decisions, tau),
        "decision_rules": evidence_tables_report.decision_rules_table(
            metrics, margin_metrics(settings), tau, ev.report_cost_bps
        ),
    }
