"""The embedded default source: a seeded universe with known latent kinematics.

Each ticker's latent log price x(t) moves with piecewise-constant acceleration a over each trading day,
so position, velocity and acceleration are exact at every session (the ground truth of later tests):

    v_t = v_{t-1} + a_t,        x_t = x_{t-1} + v_{t-1} + a_t / 2,
    a_t = theta_r (target_r - v_{t-1}) + sigma_r * eps_t

where the regime r follows a persistent Markov chain: up-trend, down-trend, mean reversion (velocity
pulled towards the price's own running anchor) and short crashes. The close is observed with Gaussian
measurement noise on ln(close); volume rises with the absolute latent move and in crashes. Tickers list
on different days (IPOs) and a few bars report zero volume, as real data does.

The universe is a pure function of (config, trading calendar span): reading any sub-range returns
exactly the rows of the full history, so nightly reads agree with backfills.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools

import numpy as np
import polars as pl

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import SyntheticConfig
from kinematic_pipeline.sources.base import conform

REGIMES = ("up_trend", "down_trend", "mean_reversion", "crash")
# Row r: probabilities of tomorrow's regime given today's r (persistent; crashes are short).
_TRANSITIONS = np.array(
    [
        [0.985, 0.004, 0.009, 0.002],
        [0.006, 0.982, 0.010, 0.002],
        [0.007, 0.006, 0.985, 0.002],
        [0.150, 0.050, 0.100, 0.700],
    ]
)
_TARGET_VELOCITY = np.array([0.0012, -0.0010, 0.0, -0.025])  # per trading day, in log price
_THETA = np.array([0.06, 0.06, 0.06, 0.35])  # speed at which velocity approaches its target
_SIGMA_ACCEL = np.array([0.0016, 0.0018, 0.0020, 0.0060])  # std of the daily acceleration shock
_MEAN_REVERSION = 0.02  # mean-reversion regime: target velocity = -k (x - anchor)


class SyntheticSource:
    """A seeded synthetic universe over the NYSE sessions in [start, end]."""

    name = "synthetic"

    def __init__(self, config: SyntheticConfig, start: dt.date, end: dt.date | None):
        self.config = config
        self.start = start
        self.end = end or dt.date(2022, 12, 30)

    def date_range(self) -> tuple[dt.date, dt.date] | None:
        days = trading_days(self.start, self.end)
        return (days[0], days[-1]) if days else None

    def read(self, start: dt.date, end: dt.date) -> pl.DataFrame:
        bars, _ = _universe(self.config, self.start, self.end)
        return bars.filter(pl.col("date").is_between(start, end))

    def read_all(self) -> pl.DataFrame:
        return _universe(self.config, self.start, self.end)[0]

    def ground_truth(self) -> pl.DataFrame:
        """Latent position (log price), velocity and acceleration per ticker and session, and the regime."""
        return _universe(self.config, self.start, self.end)[1]


def ticker_names(n: int) -> list[str]:
    return [f"SYN{i:03d}" for i in range(n)]


@functools.lru_cache(maxsize=4)
def _universe(config: SyntheticConfig, start: dt.date, end: dt.date) -> tuple[pl.DataFrame, pl.DataFrame]:
    days = trading_days(start, end)
    n_days, names = len(days), ticker_names(config.n_tickers)
    bars, truth = [], []
    for i, (name, seed) in enumerate(zip(names, np.random.SeedSequence(config.seed).spawn(len(names)))):
        rng = np.random.default_rng(seed)
        first = 0
        if i > 0 and rng.random() < config.late_listing_fraction:
            first = int(rng.integers(1, max(2, int(0.6 * n_days))))
        sim = _simulate_ticker(rng, n_days - first, config)
        dates = pl.Series("date", days[first:], dtype=pl.Date)
        bars.append(
            pl.DataFrame(
                {"ticker": name, "date": dates, **{k: sim[k] for k in ("open", "high", "low", "close", "volume")}}
            )
        )
        truth.append(
            pl.DataFrame(
                {
                    "ticker": name,
                    "date": dates,
                    "position": sim["x"],
                    "velocity": sim["v"],
                    "acceleration": sim["a"],
                    "regime": pl.Series([REGIMES[r] for r in sim["regime"]], dtype=pl.String),
                }
            )
        )
    raw = (
        pl.concat(bars)
        .with_row_index("source_row")
        .with_columns(pl.col("source_row").cast(pl.Int64), pl.lit("synthetic").alias("source_file"))
    )
    return conform(raw), pl.concat(truth)


def _simulate_ticker(rng: np.random.Generator, n: int, config: SyntheticConfig) -> dict[str, np.ndarray]:
    x, v, a = np.empty(n), np.empty(n), np.empty(n)
    regime = np.empty(n, dtype=np.int8)
    r = int(rng.integers(0, 3))
    x_prev, v_prev = np.log(rng.uniform(10.0, 300.0)), 0.0
    anchor = x_prev
    cumulative = np.cumsum(_TRANSITIONS, axis=1).tolist()
    target_velocity, theta, sigma_accel = _TARGET_VELOCITY.tolist(), _THETA.tolist(), _SIGMA_ACCEL.tolist()
    uniforms, shocks = rng.random(n).tolist(), rng.standard_normal(n).tolist()
    for t in range(n):
        r = min(bisect.bisect_right(cumulative[r], uniforms[t]), 3)
        target = -_MEAN_REVERSION * (x_prev - anchor) if r == 2 else target_velocity[r]
        acc = theta[r] * (target - v_prev) + sigma_accel[r] * shocks[t]
        x_prev, v_prev = x_prev + v_prev + acc / 2, v_prev + acc
        anchor += 0.01 * (x_prev - anchor)  # a slow moving average the mean-reversion regime pulls to
        x[t], v[t], a[t], regime[t] = x_prev, v_prev, acc, r

    noise_std = rng.uniform(*config.measurement_noise)
    log_close = x + noise_std * rng.standard_normal(n)
    close = np.exp(log_close)
    prev_close = np.concatenate([[close[0]], close[:-1]])
    open_ = prev_close * np.exp(0.4 * noise_std * rng.standard_normal(n) + 0.3 * v)
    spread = np.abs(v) + noise_std
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, spread)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, spread)))

    # Volume: AR(1) log-level around the ticker's base, lifted by the size of the latent move and by crashes.
    shocks = 0.25 * rng.standard_normal(n)
    ar = np.empty(n)
    level = 0.0
    for t in range(n):
        level = 0.7 * level + shocks[t]
        ar[t] = level
    move = np.abs(np.diff(x, prepend=x[0])) / 0.01
    log_volume = rng.uniform(np.log(2e5), np.log(5e7)) + 0.6 * np.log1p(move) + ar + 0.8 * (regime == 3)
    volume = np.round(np.exp(log_volume))
    volume[rng.random(n) < config.zero_volume_prob] = 0.0
    return {
        "open": open_,
        "high": high,
        "low": low,
        "close": close,
        "volume": volume,
        "x": x,
        "v": v,
        "a": a,
        "regime": regime,
    }
