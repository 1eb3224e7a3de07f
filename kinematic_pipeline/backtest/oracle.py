"""A ceiling on synthetic data: the "informed" policy that acts on the true latent next-day drift.

The synthetic source (``sources/synthetic.py``) keeps the latent kinematics it simulates: per ticker and
session t, the position x_t (log price), the velocity v_t and the acceleration a_t, with

    v_t = v_{t-1} + a_t,        x_{t+1} = x_t + v_t + a_{t+1} / 2,

and observes ln C_t = x_t + e_t (Gaussian measurement noise e_t). Any policy fed bars up to t can at best
recover (x_t, v_t) from them; a policy handed (x_t, v_t) itself is the best any tokenization of the bars
could do, so its skill is the ceiling the variants are measured against. Pure (polars and numpy, no dagster).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import numpy as np
import polars as pl

from kinematic_pipeline.tasks.actions import BUY, UNKNOWN_LABEL, class_weight_vector
from kinematic_pipeline.tasks.buy_sell_hold import labels_from_returns, predictions_frame
from kinematic_pipeline.tasks.targets import label_returns_close

ORACLE = "oracle"  # the variant name of the informed policy's predictions and backtests
ORACLE_DISPLAY_NAME = "Informed (latent drift)"
DRIFTS = ("velocity", "close")


def latent_drift(truth: pl.DataFrame, closes: pl.DataFrame | None = None, drift: str = "velocity") -> pl.DataFrame:
    """The informed next-day drift forecast of each (ticker, date): columns ticker, date, drift.

    ``drift="velocity"`` (the default): drift_t = v_t, the latent velocity at the close of day t. The latent
    move to the next session is x_{t+1} - x_t = v_t + a_{t+1}/2, where a_{t+1} is the next day's
    acceleration: its shock is drawn on day t+1 and unknowable at t, and its predictable part
    theta (target - v_t)/2 (regime mean-reversion of the velocity, theta = 0.06 outside crashes) is left
    out, so v_t is the drift of the latent log price that is known at t. It is what the paper's spline
    labels (the move of the fitted log price between consecutive causal fits) estimate.

    ``drift="close"``: drift_t = x_t + v_t - ln C_t, the expected next close-to-close log return
    ln C_{t+1} - ln C_t given the latent state at t and the observed close C_t (E[e_{t+1}] = 0): the
    forecast matching the "close" label source, which also knows today's measurement error e_t.

    Neither is look-ahead of observed bars: v_t = v_{t-1} + a_t and x_t depend only on the shocks of
    sessions up to t, and C_t is day t's own close, the market-on-close fill price of day t's action. Both
    are look-ahead only in the sense of the experiment: the noiseless latent state is not observable, which
    is why the informed policy is a ceiling and not a strategy.
    """
    if drift not in DRIFTS:
        raise ValueError(f"unknown drift {drift!r}: expected one of {', '.join(DRIFTS)}")
    frame = truth.select("ticker", "date", "position", "velocity")
    if drift == "velocity":
        return frame.select("ticker", "date", pl.col("velocity").cast(pl.Float64).alias("drift"))
    if closes is None:
        raise ValueError('drift="close" needs the observed closes')
    frame = frame.join(closes.select("ticker", "date", "close"), on=["ticker", "date"], how="inner")
    return frame.select(
        "ticker", "date", (pl.col("position") + pl.col("velocity") - pl.col("close").log()).alias("drift")
    )


def close_labels(bars: pl.DataFrame, tau: float) -> pl.DataFrame:
    """Realized Buy/Sell/Hold labels from the close-to-close return ln C_{t+1} - ln C_t (``tasks.buy_sell_hold``,
    source "close"); the last session of each ticker has no next close and reads -1."""
    frame = bars.select("ticker", "date", "close").sort("ticker", "date")
    log_close = frame["close"].log().to_numpy()
    log_next = frame.select(pl.col("close").log().shift(-1).over("ticker"))["close"].to_numpy()
    labels = labels_from_returns(label_returns_close(log_close, log_next), tau)
    return frame.select("ticker", "date").with_columns(pl.Series("label", labels, dtype=pl.Int8))


def oracle_predictions(
    truth: pl.DataFrame,
    bars: pl.DataFrame,
    tau: float,
    *,
    labels: pl.DataFrame | None = None,
    days: Iterable[dt.date] | None = None,
    drift: str = "velocity",
    seed: int = 0,
) -> pl.DataFrame:
    """The informed policy's predictions in ``PREDICTIONS_SCHEMA`` (variant "oracle"), one row per (ticker,
    day) that has both a latent state and a bar, sorted by ticker and date.

    truth: ``SyntheticSource.ground_truth()`` (ticker, date, position, velocity, ...).
    bars: the observed bars (ticker, date, close); the close is the fill price and, for ``drift="close"``,
        the anchor of the forecast.
    tau: the Buy/Sell threshold: action Buy if drift_t > tau, Sell if drift_t < -tau, else Hold (the label
        rule applied to the forecast, ``tasks.buy_sell_hold.labels_from_returns``); p_buy/p_sell/p_hold are the
        one-hot of the action, so action = argmax.
    labels: the realized labels of this tau (ticker, date, label), e.g. the labels asset's; None: the
        close-to-close labels of ``bars`` (``close_labels``). Days without one read -1.
    days: keep only these days (e.g. the test period); None: every day.
    drift: which latent next-day drift (``latent_drift``).
    seed: the seed column (the policy is deterministic).
    """
    forecast = latent_drift(truth, bars, drift)
    frame = forecast.join(bars.select("ticker", "date", "close"), on=["ticker", "date"], how="inner")
    if days is not None:
        frame = frame.filter(pl.col("date").is_in(list(days)))
    frame = frame.sort("ticker", "date")
    realized = close_labels(bars, tau) if labels is None else labels.select("ticker", "date", "label")
    frame = frame.join(realized, on=["ticker", "date"], how="left", maintain_order="left")
    values = frame["drift"].to_numpy()
    if not np.isfinite(values).all():
        raise ValueError("the latent drift has non-finite values")
    one_hot = np.eye(3, dtype=np.float32)[labels_from_returns(values, tau)]  # its argmax is the action
    return predictions_frame(frame, (ORACLE, float(tau), seed), one_hot, "label")


def skill_table(predictions: pl.DataFrame) -> pl.DataFrame:
    """How far each policy is from what the data allows: per variant and tau, the accuracy of its actions
    on the realized labels (labelled days only), the base rate (accuracy of always predicting the most
    frequent realized label of the same rows), and the share of the informed policy's edge over the base
    rate the variant reaches, (accuracy - base rate) / (oracle accuracy - base rate); NaN without an
    oracle row at that tau or when the oracle has no edge. Columns: variant, tau, days, accuracy, base_rate,
    share_of_oracle_edge."""
    labelled = predictions.filter(pl.col("label") != UNKNOWN_LABEL)
    schema = {
        "variant": pl.String,
        "tau": pl.Float64,
        "days": pl.Int64,
        "accuracy": pl.Float64,
        "base_rate": pl.Float64,
        "share_of_oracle_edge": pl.Float64,
    }
    if labelled.is_empty():
        return pl.DataFrame(schema=schema)
    per = labelled.group_by("variant", "tau").agg(
        pl.len().cast(pl.Int64).alias("days"),
        (pl.col("action") == pl.col("label")).mean().alias("accuracy"),
        (pl.col("label").value_counts(sort=True).first().struct.field("count") / pl.len()).alias("base_rate"),
    )
    oracle = per.filter(pl.col("variant") == ORACLE).select("tau", pl.col("accuracy").alias("_oracle"))
    edge = pl.col("_oracle") - pl.col("base_rate")
    return (
        per.join(oracle, on="tau", how="left")
        .with_columns(
            pl.when(edge > 0)
            .then((pl.col("accuracy") - pl.col("base_rate")) / edge)
            .otherwise(float("nan"))
            .fill_null(float("nan"))
            .alias("share_of_oracle_edge")
        )
        .select([pl.col(c).cast(t) for c, t in schema.items()])
        .sort("tau", "variant")
    )


CONDITIONAL_ORACLE = "oracle_law"  # the variant name of the oracle that knows the next return's conditional law
CONDITIONAL_ORACLE_DISPLAY_NAME = "Oracle (the next return's conditional law)"


def conditional_class_probabilities(drift, sd, tau: float) -> np.ndarray:
    """P(Buy), P(Sell), P(Hold) [n, 3] of a next log return r ~ N(drift, sd^2) under the label rule at ``tau``:
    P(r > tau), P(r < -tau) and the rest (``tasks.buy_sell_hold.labels_from_returns``: Buy above tau, Sell below -tau)."""
    from scipy.stats import norm

    drift, sd = np.asarray(drift, dtype=np.float64), np.broadcast_to(np.asarray(sd, dtype=np.float64), np.shape(drift))
    if not (np.isfinite(drift).all() and np.isfinite(sd).all() and (sd > 0).all()):
        raise ValueError("the conditional law needs a finite drift and a finite positive sd on every row")
    buy, sell = norm.sf((tau - drift) / sd), norm.cdf((-tau - drift) / sd)
    return np.column_stack([buy, sell, np.clip(1.0 - buy - sell, 0.0, 1.0)])


def conditional_oracle_predictions(rows: pl.DataFrame, tau: float, class_weights, seed: int = 0) -> pl.DataFrame:
    """The oracle that knows the law of the next close-to-close log return, in ``PREDICTIONS_SCHEMA`` (variant
    ``CONDITIONAL_ORACLE``).

    rows: ticker, date, close, label and the law's ``drift`` and ``sd`` on each row (r_{t+1} ~ N(drift, sd^2)).
    Its true probabilities p are ``conditional_class_probabilities``; what it stores as its own softmax is q ∝ w ⊙ p
    (``class_weights`` w), the output of a network trained with the paper's weighted cross-entropy that had learned
    the law exactly, and as its probabilities that q de-weighted (p again, up to float32), as a model's
    (``buy_sell_hold.predictions_frame``). So every rule reads it as it reads a model, and the argmax rules take
    argmax(w ⊙ p): whatever the oracle knows, a Buy needs w_buy p_buy above w_sell p_sell and w_hold p_hold. Rows
    sorted by ticker and date."""

    p = conditional_class_probabilities(rows["drift"].to_numpy(), rows["sd"].to_numpy(), tau)
    q = p * class_weight_vector(class_weights)
    q = (q / q.sum(axis=1, keepdims=True)).astype(np.float32)
    return predictions_frame(rows, (CONDITIONAL_ORACLE, float(tau), seed), q, "label", class_weights)


def least_buying_drift(tau: float, sd: float, class_weights, step: float = 0.001) -> float:
    """The smallest one-day expected return, in units of ``sd``, at which the class-weighted argmax of an exactly
    calibrated forecast r ~ N(drift, sd^2) picks Buy (NaN if none up to 5 sd): what either argmax rule demands of a
    model's knowledge before it can hold a position."""

    z = np.arange(0.0, 5.0 + step, step)
    q = conditional_class_probabilities(z * sd, np.full(z.size, sd), tau) * class_weight_vector(class_weights)
    buys = np.flatnonzero(q.argmax(axis=1) == BUY)
    return float(z[buys[0]]) if buys.size else float("nan")
