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

A positive control (``planted_ic``, ``KP_PLANTED_IC``): each ticker's next log return is a persistent latent
drift plus noise, r_{t+1} = mu_t + e_{t+1}, with mu an AR(1) (``planted_persistence``) independent across
tickers and e ~ N(0, 1.5%). Its stationary std is set so that the oracle's daily cross-sectional IC,
corr(mu_t, r_{t+1}), equals ``planted_ic``: sd(mu) = ic sd(e) / sqrt(1 - ic^2). Prices observe mu only through
past returns, so what a model can reach is below the oracle's IC (a causal EWMA of returns reached 47% of its
Spearman IC at 0.1 and 64% at 0.2 on 40 names over 2021-2022, science-5 section 4); at 0 the prices are a random walk
and nothing is predictable. The ground truth
holds mu as the velocity, its daily change as the acceleration, and the regime "planted".

A planted volatility control (``planted_vol``, ``KP_PLANTED_VOL=1``): each ticker's daily log return is
N(0, exp(``VOL_LEVEL`` + h_t)), h a log-AR(1) (persistence ``VOL_PERSISTENCE``, stationary sd ``VOL_SD``) independent
across tickers, and each day's high-low range scales with that day's sd. Next week's variance is predictable from the
last weeks' returns, and its exact forecast from h_t (``planted_log_variance``) is the volatility task's oracle row.
The ground truth holds the log variance ``VOL_LEVEL`` + h_t of the day's return (NaN in the other universes),
the log close as the position, no drift, and the regime "planted_vol".
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools

import numpy as np
import polars as pl

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import SyntheticConfig
from kinematic_pipeline.config.settings import SYNTHETIC_TICKER
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

    def oracle(self, task) -> pl.DataFrame | None:
        """The exact forecast of ``task``'s target on this universe, where it plants one: a realized-variance task's
        (kind "vol") on a planted-volatility universe (``planted_log_variance``); else None."""
        if not self.config.planted_vol or getattr(task, "kind", None) != "vol":
            return None
        return planted_log_variance(self.ground_truth(), task.horizon)

    def ground_truth(self) -> pl.DataFrame:
        """Latent position (log price), velocity and acceleration per ticker and session, the regime, and the log
        variance of the day's return (planted-volatility universes; NaN in the others)."""
        return _universe(self.config, self.start, self.end)[1]


def ticker_names(n: int) -> list[str]:
    return [SYNTHETIC_TICKER.format(i) for i in range(n)]


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
        simulate = _simulate_ticker if config.planted_ic is None else _planted_ticker
        simulate = _planted_vol_ticker if config.planted_vol else simulate
        sim = simulate(rng, n_days - first, config)
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
                    "regime": pl.Series([_regime_name(r) for r in sim["regime"]], dtype=pl.String),
                    "log_variance": sim.get("log_variance", np.full(len(dates), np.nan)),
                }
            )
        )
    raw = (
        pl.concat(bars)
        .with_row_index("source_row")
        .with_columns(pl.col("source_row").cast(pl.Int64), pl.lit("synthetic").alias("source_file"))
    )
    return conform(raw), pl.concat(truth)


PLANTED_NOISE = 0.015  # daily std of the unpredictable part of a planted universe's log return
PLANTED_REGIME, PLANTED_VOL_REGIME = -1, -2
VOL_PERSISTENCE, VOL_SD, VOL_LEVEL = 0.97, 0.6, float(np.log(0.015**2))  # a planted log variance's AR(1)


def _regime_name(code: int) -> str:
    return {PLANTED_REGIME: "planted", PLANTED_VOL_REGIME: "planted_vol"}.get(code) or REGIMES[code]


def planted_forecast(h: np.ndarray, horizon: int) -> np.ndarray:
    """ln E[sum of the next ``horizon`` squared returns | h_t] under the planted log-AR(1): r_(t+i)^2 has the
    conditional mean exp(VOL_LEVEL + phi^i h_t + sd^2 (1 - phi^(2i)) / 2), h_(t+i) given h_t being normal."""
    i = np.arange(1, horizon + 1)
    phi, sd = VOL_PERSISTENCE, VOL_SD
    return np.log(np.exp(VOL_LEVEL + np.outer(h, phi**i) + sd**2 * (1 - phi ** (2 * i)) / 2).sum(axis=1))


def planted_log_variance(truth: pl.DataFrame, horizon: int) -> pl.DataFrame:
    """The oracle of a planted-volatility universe's ``truth`` (``SyntheticSource.ground_truth``): ticker, date and
    ``planted_forecast`` of its next ``horizon`` returns' variance from the day's latent h, as the volatility task's
    predictions give it (log_variance)."""
    h = truth["log_variance"].to_numpy() - VOL_LEVEL
    return truth.select("ticker", "date").with_columns(pl.Series("log_variance", planted_forecast(h, horizon)))


def _planted_vol_ticker(rng: np.random.Generator, n: int, config: SyntheticConfig) -> dict[str, np.ndarray]:
    """r_t ~ N(0, exp(VOL_LEVEL + h_t)), h a stationary log-AR(1); the range of day t scales with its sd."""
    phi, shocks = VOL_PERSISTENCE, rng.standard_normal(n)
    h = np.empty(n)
    h[0] = VOL_SD * shocks[0]
    for t in range(1, n):
        h[t] = phi * h[t - 1] + VOL_SD * np.sqrt(1.0 - phi**2) * shocks[t]
    sd = np.exp((VOL_LEVEL + h) / 2)
    r = np.concatenate([[0.0], sd[1:] * rng.standard_normal(n - 1)])
    x = np.log(rng.uniform(10.0, 300.0)) + np.cumsum(r)
    close = np.exp(x)
    open_ = np.concatenate([[close[0]], close[:-1]]) * np.exp(0.3 * r)
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, 0.5, n)) * sd)
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, 0.5, n)) * sd)
    volume = np.round(np.exp(rng.uniform(np.log(2e5), np.log(5e7)) + 0.25 * rng.standard_normal(n)))
    volume[rng.random(n) < config.zero_volume_prob] = 0.0
    bars = {"open": open_, "high": high, "low": low, "close": close, "volume": volume}
    zero, regime = np.zeros(n), np.full(n, PLANTED_VOL_REGIME, dtype=np.int8)
    return bars | {"x": x, "v": zero, "a": zero, "regime": regime, "log_variance": VOL_LEVEL + h}


def _planted_ticker(rng: np.random.Generator, n: int, config: SyntheticConfig) -> dict[str, np.ndarray]:
    """r_{t+1} = mu_t + e_{t+1}: the drift mu is AR(1), stationary from the first day, with the std that makes the
    oracle's IC corr(mu_t, r_{t+1}) equal ``config.planted_ic``."""
    ic, phi = float(config.planted_ic), config.planted_persistence
    sd_mu = ic * PLANTED_NOISE / np.sqrt(1.0 - ic**2)
    shocks, noise = rng.standard_normal(n), PLANTED_NOISE * rng.standard_normal(n)
    mu = np.empty(n)
    level = sd_mu * shocks[0]
    for t in range(n):
        level = level if t == 0 else phi * level + sd_mu * np.sqrt(1.0 - phi**2) * shocks[t]
        mu[t] = level
    r = np.concatenate([[0.0], mu[:-1] + noise[1:]])  # the return into day t+1 is mu_t + e_{t+1}
    x = np.log(rng.uniform(10.0, 300.0)) + np.cumsum(r)
    close = np.exp(x)
    prev_close = np.concatenate([[close[0]], close[:-1]])
    open_ = prev_close * np.exp(0.3 * r)
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, 0.005, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, 0.005, n)))
    volume = np.round(np.exp(rng.uniform(np.log(2e5), np.log(5e7)) + 0.25 * rng.standard_normal(n)))
    volume[rng.random(n) < config.zero_volume_prob] = 0.0
    regime = np.full(n, PLANTED_REGIME, dtype=np.int8)
    bars = {"open": open_, "high": high, "low": low, "close": close, "volume": volume}
    return bars | {"x": x, "v": mu, "a": np.diff(mu, prepend=mu[0]), "regime": regime}


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
