"""alpha by maximum marginal likelihood over the training period, and the lookup the tokenizer uses.

``estimate_alphas`` reads raw_ohlcv shards dated on or before the first fold's training end only (``folds.first_cut``:
the tokens every fold shares may depend on nothing a fold tests; a single cut: ``split.train_end``), builds one
session-indexed series per ticker (missing sessions and zero volumes are NaN) and maximizes the
exact profile likelihood (``kinematic_pipeline.tokenize.alpha_mle``): pooled over the corpus, and per
ticker when ``tokenize.alpha_mle_scope = "ticker"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import first_cut
from kinematic_pipeline.report.markdown import Markdown, markdown_table
from kinematic_pipeline.tokenize import (
    estimate_alpha_price,
    estimate_alpha_price_pooled,
    estimate_alpha_volume,
    estimate_alpha_volume_pooled,
)
from kinematic_pipeline.warehouse import ALPHA_ESTIMATES, RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact

CORPUS = "__corpus__"
ALPHA_SCHEMA: dict[str, pl.DataType] = {
    "scope": pl.String,  # "__corpus__" or a ticker
    "kind": pl.String,  # price | volume
    "alpha": pl.Float64,
    "log_likelihood": pl.Float64,
    "n_obs": pl.Int64,
    "converged": pl.Boolean,
    "fit_start": pl.Date,
    "fit_end": pl.Date,
}


def training_series(settings: Settings) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Per ticker, session-indexed ln(close) and ln(volume) over the training period (NaN = missing)."""
    wh = settings.warehouse
    days = wh.shard_days(RAW_OHLCV, until=first_cut(settings))
    if not days:
        raise FileNotFoundError(f"no raw_ohlcv shards on or before {first_cut(settings)} in {wh.root / RAW_OHLCV}")
    bars = exact.read_parquet(wh.verified_shards(RAW_OHLCV, days))
    index = {d: k for k, d in enumerate(days)}
    bars = bars.with_columns(
        pl.col("date").replace_strict(index, return_dtype=pl.Int64).alias("session"),
        pl.col("close").log().alias("y"),
        pl.when(pl.col("volume_missing")).then(None).otherwise(pl.col("volume").log()).alias("v"),
    ).sort("ticker", "session")
    tickers, prices, volumes = [], [], []
    for (ticker,), group in bars.group_by("ticker", maintain_order=True):
        first, last = group["session"].min(), group["session"].max()
        y = np.full(last - first + 1, np.nan)
        v = np.full(last - first + 1, np.nan)
        pos = group["session"].to_numpy() - first
        y[pos] = group["y"].to_numpy()
        v[pos] = group["v"].fill_null(np.nan).to_numpy()
        tickers.append(ticker)
        prices.append(y)
        volumes.append(v)
    return tickers, prices, volumes


def estimate_alphas(settings: Settings) -> pl.DataFrame:
    """ALPHA_SCHEMA rows: the pooled corpus estimates, plus per-ticker ones for the "ticker" scope."""
    tickers, prices, volumes = training_series(settings)
    fit = {"fit_start": settings.data.start_date, "fit_end": first_cut(settings)}
    usable = [
        k for k in range(len(tickers)) if np.isfinite(prices[k]).sum() >= 8 and np.isfinite(volumes[k]).sum() >= 8
    ]
    rows = []
    for kind, pooled, series in (
        ("price", estimate_alpha_price_pooled, prices),
        ("volume", estimate_alpha_volume_pooled, volumes),
    ):
        est = pooled([series[k] for k in usable])
        rows.append({"scope": CORPUS, "kind": kind, **_fields(est), **fit})
    if settings.tokenize.alpha_mle_scope == "ticker":
        for k in usable:
            for kind, single, series in (
                ("price", estimate_alpha_price, prices),
                ("volume", estimate_alpha_volume, volumes),
            ):
                try:
                    est = single(series[k])
                except ValueError:  # too few points or an exact line: this ticker falls back to the corpus
                    continue
                rows.append({"scope": tickers[k], "kind": kind, **_fields(est), **fit})
    return pl.DataFrame(rows, schema=ALPHA_SCHEMA)


def _fields(est) -> dict:
    return {"alpha": est.alpha, "log_likelihood": est.log_likelihood, "n_obs": est.n_obs, "converged": est.converged}


@dataclass(frozen=True)
class AlphaSummary:
    """What materializing alpha_estimates wrote: the estimates (ALPHA_SCHEMA) and what the tokenizer takes."""

    estimates: pl.DataFrame
    fit_window: str  # the training days the estimates are fitted on
    used_by_tokenizer: str  # tokenize.alpha_price/alpha_volume: constants or 'mle'

    def metadata(self) -> dict:
        """What the alpha_estimates materialization shows (plain values)."""
        estimates = self.estimates
        corpus = estimates.filter(pl.col("scope") == CORPUS)
        alpha = dict(zip(corpus["kind"].to_list(), corpus["alpha"].to_list()))
        return {
            "alpha_price_corpus": alpha["price"],
            "alpha_volume_corpus": alpha["volume"],
            "estimates": Markdown(markdown_table(estimates.head(40))),
            "per_ticker_estimates": estimates.height - corpus.height,
            "fit_window": self.fit_window,
            "used_by_tokenizer": self.used_by_tokenizer,
        }


def materialize_alpha_estimates(settings: Settings) -> AlphaSummary:
    estimates = estimate_alphas(settings)
    settings.warehouse.write(estimates, settings.warehouse.alpha_estimates_file())
    settings.warehouse.refresh_view(ALPHA_ESTIMATES, ALPHA_SCHEMA)
    cfg = settings.tokenize
    return AlphaSummary(
        estimates=estimates,
        fit_window=f"{settings.data.start_date} .. {first_cut(settings)} (the first fold's training days)",
        used_by_tokenizer=f"alpha_price={cfg.alpha_price}, alpha_volume={cfg.alpha_volume}",
    )


@dataclass(frozen=True)
class AlphaLookup:
    """The alpha of each ticker's windows: the configured constants, or the stored ML estimates."""

    price: float | dict[str, float]
    volume: float | dict[str, float]
    corpus: dict[str, float]

    @classmethod
    def from_settings(cls, settings: Settings) -> AlphaLookup:
        cfg = settings.tokenize
        values: dict[str, float | dict[str, float]] = {}
        corpus: dict[str, float] = {}
        estimates = None
        for kind, setting in (("price", cfg.alpha_price), ("volume", cfg.alpha_volume)):
            if setting == "mle":
                if estimates is None:
                    path = settings.warehouse.alpha_estimates_file()
                    if not path.exists():
                        raise FileNotFoundError(f"alpha_{kind} = 'mle' needs {path}: materialize alpha_estimates first")
                    estimates = exact.read_parquet(path)
                rows = estimates.filter(pl.col("kind") == kind)
                corpus[kind] = rows.filter(pl.col("scope") == CORPUS)["alpha"][0]
                values[kind] = dict(zip(rows["scope"].to_list(), rows["alpha"].to_list()))
            else:
                alpha = float(setting)
                if not np.isfinite(alpha) or alpha <= 0:
                    raise ValueError(f"tokenize.alpha_{kind} must be a positive number or 'mle', got {setting!r}")
                values[kind] = alpha
        return cls(price=values["price"], volume=values["volume"], corpus=corpus)

    def _kind(self, kind: str, tickers: list[str]) -> np.ndarray | float:
        value = getattr(self, kind)
        if isinstance(value, dict):
            return np.array([value.get(t, self.corpus[kind]) for t in tickers], dtype=np.float64)
        return value

    def for_tickers(self, tickers: list[str]) -> tuple[np.ndarray | float, np.ndarray | float]:
        return self._kind("price", tickers), self._kind("volume", tickers)

    def describe(self, kind: str) -> str:
        value = getattr(self, kind)
        if isinstance(value, dict):
            scope = "ticker" if len(value) > 1 else "corpus"
            return f"mle:{scope}:corpus={self.corpus[kind]:.6g}"
        return f"{value:g}"
