"""Configuration: frozen dataclasses, three named profiles and the operator's environment variables.

A profile (``ci``, ``demo``, ``paper``) is a named set of values, selected by ``KP_PROFILE``. The
operator interface of DESIGN.md overrides a few fields from the environment (or Dagster config at the
boundary): ``KP_SOURCE``, ``KP_SOURCE_PATH``, ``KP_WAREHOUSE``, plus ``KP_START_DATE`` /
``KP_END_DATE`` to narrow the history. Nothing here imports dagster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

PROFILES = ("ci", "demo", "paper")
SOURCES = ("synthetic", "parquet", "csv", "yfinance")


@dataclass(frozen=True)
class SyntheticConfig:
    """The embedded default universe: a seeded latent-kinematics generator (see sources/synthetic.py)."""

    n_tickers: int = 8  # names in the universe
    seed: int = 20240917  # one seed for the whole universe; each ticker derives its own stream
    late_listing_fraction: float = 0.25  # share of tickers that list after the first day (IPOs)
    zero_volume_prob: float = 2e-4  # chance a bar reports zero volume (a missing measurement)
    measurement_noise: tuple[float, float] = (0.002, 0.008)  # range of per-ticker noise std of ln(close)


@dataclass(frozen=True)
class DataConfig:
    """Where the bars come from and which history the trading-day partitions cover."""

    source: str = "synthetic"  # synthetic | parquet | csv | yfinance
    source_path: str | None = None  # file or directory for parquet/csv
    start_date: dt.date = dt.date(2021, 1, 4)  # first trading-day partition
    end_date: dt.date | None = dt.date(2022, 12, 30)  # last partition to load (None: the source's last day)
    tickers: tuple[str, ...] | None = None  # restrict the universe (None: every ticker the source has)
    train_end: dt.date = dt.date(2021, 12, 31)  # last day of the training period (paper: 2022-12-31)


@dataclass(frozen=True)
class IngestConfig:
    """The raw_ohlcv data contract (DESIGN.md)."""

    # Adjusted prices carry rounding noise (~2e-6 relative on the real file): only a high/low outside
    # open/close by more than this is an inconsistency.
    hl_rel_tolerance: float = 1e-6
    # "quarantine": high/low-inconsistent rows go to the quarantine (the contract's default);
    # "flag": they are kept with hl_inconsistent = true (their close and volume are still usable).
    hl_policy: str = "quarantine"
    # Per-partition observations (metadata per trading day in the UI) only for runs this small;
    # larger backfills record per-partition facts in the manifest table instead.
    max_partitions_observed: int = 31


@dataclass(frozen=True)
class TokenizeConfig:
    """Spline enrichment (DESIGN.md): smoothing, time unit, window admission, labels."""

    alpha_price: float | str = 5.0  # paper eq. (1): alpha = 5 (trading days); or "mle" (alpha_estimates)
    alpha_volume: float | str = 5.0  # paper eq. (2), separately configurable; or "mle"
    alpha_mle_scope: str = "corpus"  # "corpus": one pooled estimate; "ticker": one per ticker (corpus fallback)
    time_unit: str = "session"  # "session": t_k = k; "calendar": calendar days x 252/365.25 (mean step ~1)
    max_missing_price: int = 4  # a window is admitted with at most this many missing closes of its 65
    min_valid_volume: int = 32  # ... and at least this many valid (non-zero) volumes of its 64
    label_source: str = "spline"  # "spline": paper's end-of-window spline positions; "close": close-to-close
    taus: tuple[float, ...] = (0.0025, 0.005, 0.01, 0.02)  # Buy/Sell thresholds on the next-day log return
    block_days: int = 256  # trading days tokenized per batch (bounds memory on long backfills)
    write_threads: int = 2  # Parquet shards compressed and written in parallel


@dataclass(frozen=True)
class Settings:
    """Everything a stage needs, resolved once per process."""

    profile: str = "ci"
    warehouse: Path = Path("warehouse")
    data: DataConfig = field(default_factory=DataConfig)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)

    @property
    def catalog_path(self) -> Path:
        return self.warehouse / "catalog.duckdb"


def _profile_ci() -> Settings:
    return Settings(profile="ci")


def _profile_demo() -> Settings:
    return Settings(
        profile="demo",
        data=DataConfig(start_date=dt.date(2017, 1, 3), end_date=dt.date(2022, 12, 30)),
        synthetic=SyntheticConfig(n_tickers=40),
    )


def _profile_paper() -> Settings:
    # The paper's corpus: real bars from 2000, training through 2022-12-31.
    return Settings(
        profile="paper",
        data=DataConfig(
            source="parquet",
            start_date=dt.date(2000, 1, 3),
            end_date=None,
            train_end=dt.date(2022, 12, 31),
        ),
        synthetic=SyntheticConfig(n_tickers=100),
    )


_PROFILE_FACTORIES = {"ci": _profile_ci, "demo": _profile_demo, "paper": _profile_paper}


def profile_settings(name: str) -> Settings:
    """The named profile's settings, before any environment override."""
    if name not in _PROFILE_FACTORIES:
        raise ValueError(f"unknown profile {name!r}: expected one of {', '.join(PROFILES)}")
    return _PROFILE_FACTORIES[name]()


def _parse_date(text: str, variable: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{variable}={text!r} is not an ISO date (YYYY-MM-DD)") from exc


def load_settings(
    profile: str | None = None,
    *,
    source: str | None = None,
    source_path: str | None = None,
    warehouse: str | os.PathLike | None = None,
    start_date: dt.date | None = None,
    end_date: dt.date | None = None,
    env: dict[str, str] | None = None,
) -> Settings:
    """Resolve settings: profile defaults < environment (KP_*) < explicit arguments."""
    env = dict(os.environ if env is None else env)
    base = profile_settings(profile or env.get("KP_PROFILE") or "ci")

    source = source or env.get("KP_SOURCE") or base.data.source
    if source not in SOURCES:
        raise ValueError(f"KP_SOURCE={source!r}: expected one of {', '.join(SOURCES)}")
    source_path = source_path or env.get("KP_SOURCE_PATH") or base.data.source_path
    if source in ("parquet", "csv") and not source_path:
        raise ValueError(f"KP_SOURCE={source} needs KP_SOURCE_PATH (a file or a directory of {source} files)")
    if start_date is None and env.get("KP_START_DATE"):
        start_date = _parse_date(env["KP_START_DATE"], "KP_START_DATE")
    if end_date is None and env.get("KP_END_DATE"):
        end_date = _parse_date(env["KP_END_DATE"], "KP_END_DATE")
    data = dataclasses.replace(
        base.data,
        source=source,
        source_path=source_path,
        start_date=start_date or base.data.start_date,
        end_date=end_date if end_date is not None else base.data.end_date,
    )
    # A real source has no fixed last day: load what it holds unless told otherwise.
    if source != "synthetic" and end_date is None and not env.get("KP_END_DATE"):
        data = dataclasses.replace(data, end_date=None)
    if data.end_date is not None and data.end_date < data.start_date:
        raise ValueError(f"end date {data.end_date} is before start date {data.start_date}")

    wh = Path(warehouse or env.get("KP_WAREHOUSE") or base.warehouse).expanduser().resolve()
    return dataclasses.replace(base, warehouse=wh, data=data)
