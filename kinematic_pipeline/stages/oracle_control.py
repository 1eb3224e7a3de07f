"""What a decision rule can do with perfect information: the synthetic universe's oracle through the report's rules.

On a synthetic run the source knows the law of every next close-to-close log return given the latent state at the
close of day t: on a planted universe exactly (r_{t+1} = mu_t + e_{t+1}, e ~ N(0, ``PLANTED_NOISE``^2),
``sources/synthetic.py``), on the regime universe a normal around the latent drift (``oracle.latent_drift``, "close")
with the sd of its residual on the test rows. The oracle's probabilities of each class
(``oracle.conditional_oracle_predictions``, stored as a weighted-CE network that had learned the law would output
them) go through the same three rules and the same backtests as every model: the paper's argmax, the calibrated
argmax (the same argmax here: the oracle needs no calibration) and the margin rule (m = 0: its probabilities are
exact, nothing to choose on validation days). If the argmax rules do not trade the oracle, no tokenization can make
them trade: "never holds a position" is then the rule's, not the tokens'. None on real data (no law is known).
No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.oracle import conditional_oracle_predictions, latent_drift, oracle_predictions
from kinematic_pipeline.backtest.portfolio import portfolio_summary, ticker_excess
from kinematic_pipeline.backtest.sweep import run_sweep
from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import run_class_weights
from kinematic_pipeline.pins import verified_labels
from kinematic_pipeline.sources import make_source
from kinematic_pipeline.tasks.actions import BUY
from kinematic_pipeline.tasks.buy_sell_hold import at_tau, tau_column
from kinematic_pipeline.tasks.rules import MarginRule, PaperArgmax
from kinematic_pipeline.warehouse import RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact

RULE_LABELS = {  # a rule's name in the verdict and the strategies -> how the tables name it
    "paper": "paper: argmax of the model's own softmax",
    "calibrated": "calibrated argmax",
    "margin": "margin rule",
}
ORACLE_COLUMNS = ("Rule", "Buys (% of ticker-days)", "Tickers ever long", "Days in market", "Sharpe", "Mean return")


def oracle_law_rows(settings: Settings, predictions: pl.DataFrame) -> pl.DataFrame | None:
    """ticker, date, close, label, drift, sd of the test tickers' test days at the report's tau (from the
    predictions view), with the law of the next close-to-close log return; None on a source that is not synthetic
    or without rows."""
    if settings.data.source != "synthetic":
        return None
    from kinematic_pipeline.sources.synthetic import PLANTED_NOISE

    base = (
        predictions.filter(at_tau(settings.evaluate.report_tau))
        .select("ticker", "date", "close", "label")
        .unique(subset=["ticker", "date"], keep="first")
        .sort("ticker", "date")
    )
    if base.height == 0:
        return None
    tickers = base["ticker"].unique().to_list()
    truth = make_source(settings).ground_truth().filter(pl.col("ticker").is_in(tickers))
    rows = base.join(latent_drift(truth, base, "close"), on=["ticker", "date"], how="inner")
    if settings.synthetic.planted_ic is not None:
        return rows.with_columns(pl.lit(PLANTED_NOISE).alias("sd"))
    next_return = pl.col("close").log().shift(-1).over("ticker") - pl.col("close").log()
    residual = (next_return - pl.col("drift")).alias("residual")
    sd = rows.with_columns(residual).group_by("ticker").agg(pl.col("residual").std().alias("sd"))
    return rows.join(sd, on="ticker", how="left").filter(pl.col("sd").is_finite() & (pl.col("sd") > 0))


def oracle_rule_frames(settings: Settings, rows: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The oracle's predictions under each rule (``RULE_LABELS``' names), ready for ``run_sweep``."""
    weights = run_class_weights(settings)  # read as a model trained with the run's weights would be
    frame = conditional_oracle_predictions(rows, settings.evaluate.report_tau, weights)
    margin = frame.with_columns(pl.Series("action", MarginRule().at(frame, 0.0), dtype=pl.Int8))
    return {"paper": PaperArgmax(weights).decide(frame), "calibrated": frame, "margin": margin}


def oracle_rule_records(settings: Settings, predictions: pl.DataFrame, cost_bps: float) -> dict[str, tuple] | None:
    """{rule: (the oracle's backtest metrics at ``cost_bps``, its equal-weight portfolio summary (cash at rf), its
    predictions under the rule)}; None where no law is known (real data)."""
    rows = oracle_law_rows(settings, predictions)
    if rows is None or rows.height == 0:
        return None
    ev, out = settings.evaluate, {}
    for rule, frame in oracle_rule_frames(settings, rows).items():
        sweep = run_sweep(frame, ev.backtest, benchmark=False)
        metrics = sweep.metrics.filter(pl.col("cost_bps") == cost_bps)
        equity = sweep.equity.filter(pl.col("cost_bps") == cost_bps)
        summary = portfolio_summary(ticker_excess(equity, ev.backtest.rf_annual), ["variant"]).row(0, named=True)
        out[rule] = (metrics, summary, frame)
    return out


def oracle_days_in_market(settings: Settings, predictions: pl.DataFrame) -> dict[str, int] | None:
    """{rule: the oracle's equal-weight portfolio's days in the market at the verdict's cost}; None on real data."""
    records = oracle_rule_records(settings, predictions, settings.evaluate.verdict_cost_bps)
    return None if records is None else {rule: int(r[1]["days_in_market"]) for rule, r in records.items()}


def oracle_rule_table(settings: Settings, predictions: pl.DataFrame) -> pl.DataFrame | None:
    """One row per rule: how often it buys the oracle, how many test tickers it ever holds, the equal-weight
    portfolio's days in the market and bounded Sharpe (cash at rf) and the mean total return at the report's cost;
    None where no law is known (real data)."""
    records = oracle_rule_records(settings, predictions, settings.evaluate.report_cost_bps)
    if records is None:
        return None
    out = []
    for rule, (metrics, summary, frame) in records.items():
        sharpe = summary["sharpe"]
        out.append(
            {
                "Rule": RULE_LABELS[rule],
                "Buys (% of ticker-days)": f"{100 * float((frame['action'] == BUY).mean()):.2f}%",
                "Tickers ever long": f"{int((metrics['exposure'] > 0).sum())}/{metrics.height}",
                "Days in market": f"{summary['days_in_market']}/{summary['days']}",
                "Sharpe": "N/A" if sharpe is None or not np.isfinite(sharpe) else f"{sharpe:.2f}",
                "Mean return": f"{100 * float(metrics['total_return'].mean()):.1f}%",
            }
        )
    return pl.DataFrame(out, schema={c: pl.String for c in ORACLE_COLUMNS})


def oracle_test_predictions(settings: Settings, predictions: pl.DataFrame, tau: float) -> pl.DataFrame | None:
    """The informed policy on the test tickers and days, for the synthetic source (None for real data):
    it knows the latent state the synthetic bars were drawn from, which no tokenization of the bars can."""
    if settings.data.source != "synthetic":
        return None
    wh, days = settings.warehouse, sorted(predictions["date"].unique().to_list())
    tickers = predictions["ticker"].unique().to_list()
    bars = exact.read_parquet(wh.verified_shards(RAW_OHLCV, days), columns=["ticker", "date", "close"])
    labels = exact.read_parquet(verified_labels(settings, days), columns=["ticker", "date", tau_column(tau)])
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
