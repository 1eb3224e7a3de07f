"""The tokenize stage without the orchestrator: raw_ohlcv shards -> one token shard per trading day.

For the window ending on session i, ticker j: price samples ln(close) on sessions i-64..i (65 knots) and
volume measurements ln(volume) on sessions i-63..i (64 intervals). A missing bar or a zero volume is a
missing measurement (NaN: the spline drops its term). A ticker gets a window on day i when it has a close
on day i, at most ``max_missing_price`` missing closes and at least ``min_valid_volume`` valid volumes in
the window. Only sessions <= i are ever read for day i's window (no look-ahead).

Each shard ``$KP_WAREHOUSE/<asset>/<date>.parquet`` holds, per ticker: ``ticker``, ``date``,
``n_missing_price``, ``n_missing_volume``, ``tokens`` (float32 [64, channels]) and the tokenization's extra
columns (spline_tokens: ``end_position``, the float64 fitted log price at the last knot, for the paper's spline
labels): ``Tokenization.shard_schema``. How each tokenization computes its tokens is its own
(``tokenizations/``). Tokens are stored unanchored and unnormalized; anchoring and z-scoring (corpus_stats)
happen where windows are consumed.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from kinematic_pipeline import __version__
from kinematic_pipeline.calendar import session_before, trading_days
from kinematic_pipeline.config import Settings
from kinematic_pipeline.stages.alpha import AlphaLookup
from kinematic_pipeline.tokenizations import Tokenization, Workspace, chosen
from kinematic_pipeline.warehouse import RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import combined_hash, digest
from kinematic_pipeline.windows import LOOKBACK, N_KNOTS, N_TOKENS

CALENDAR_DAYS_PER_SESSION = 365.25 / 252
TOKEN_COMPRESSION = "lz4"  # float32 tokens barely compress (zstd saves ~4%); lz4 writes twice as fast
TOKEN_MANIFEST_SCHEMA: dict[str, pl.DataType] = {
    "partition_date": pl.Date,
    "windows": pl.Int64,
    "content_hash": pl.String,  # sha256 of the shard's bytes
    "raw_inputs_digest": pl.String,  # sha256 over the content hashes of the 65 raw_ohlcv shards read
    "alpha_price": pl.String,
    "alpha_volume": pl.String,
    "time_unit": pl.String,
    "code_version": pl.String,
}


@dataclass(frozen=True)
class Panel:
    """Dense bars of a range of sessions: [session, ticker] arrays (NaN = missing measurement)."""

    sessions: list[dt.date]
    tickers: list[str]
    log_close: np.ndarray  # float64 [S, J]
    log_volume: np.ndarray  # float64 [S, J]; NaN where the bar is missing or its volume is 0
    raw_hashes: list[str]  # content hash of each session's raw_ohlcv shard ("" before the history starts)


def load_panel(settings: Settings, first_day: dt.date, last_day: dt.date) -> Panel:
    """Bars of the sessions ``first_day - 64 sessions .. last_day`` from the raw_ohlcv shards."""
    wh = settings.warehouse
    history_start = settings.data.start_date
    sessions = trading_days(max(history_start, session_before(first_day, LOOKBACK)), last_day)
    paths = [wh.shard(RAW_OHLCV, day) for day in sessions]
    manifests = [wh.manifest(RAW_OHLCV, day) for day in sessions]
    for day, path, manifest in zip(sessions, paths, manifests):
        if not path.exists() or not manifest.exists():
            raise FileNotFoundError(
                f"raw_ohlcv partition {day} is not materialized (no {path}); materialize raw_ohlcv for it first"
            )
    hashes = exact.read_parquet(manifests, columns=["content_hash"])["content_hash"].to_list()
    paths = wh.verified_shards(RAW_OHLCV, sessions)  # never read a day whose bytes are not its manifest's
    bars = exact.read_parquet(paths, columns=["ticker", "date", "close", "volume", "volume_missing"])
    _raise_on_non_finite(bars, wh)
    tickers = sorted(bars["ticker"].unique().to_list())
    s_index = {d: k for k, d in enumerate(sessions)}
    t_index = {t: k for k, t in enumerate(tickers)}
    rows = np.fromiter((s_index[d] for d in bars["date"].to_list()), dtype=np.int64, count=bars.height)
    cols = np.fromiter((t_index[t] for t in bars["ticker"].to_list()), dtype=np.int64, count=bars.height)
    log_close = np.full((len(sessions), len(tickers)), np.nan)
    log_volume = np.full((len(sessions), len(tickers)), np.nan)
    log_close[rows, cols] = np.log(bars["close"].to_numpy())
    volume = bars["volume"].to_numpy()
    with np.errstate(divide="ignore"):
        log_volume[rows, cols] = np.where(bars["volume_missing"].to_numpy(), np.nan, np.log(volume))
    return Panel(sessions, tickers, log_close, log_volume, hashes)


def _raise_on_non_finite(bars: pl.DataFrame, wh) -> None:
    """Name the bar when a shard holds what ingest should have quarantined (a shard written by old code or
    edited by hand): the kernels would only report a window number."""
    bad = bars.filter(~(pl.col("close").is_finite() & pl.col("volume").is_finite()).fill_null(True))
    if bad.height:
        row = bad.row(0, named=True)
        raise ValueError(
            f"raw_ohlcv {wh.shard(RAW_OHLCV, row['date'])}: ticker {row['ticker']} on {row['date']}: "
            f"close={row['close']}, volume={row['volume']} is not finite ({bad.height} such bar(s)); "
            "re-materialize raw_ohlcv for that day (ingest quarantines non-finite values)"
        )


@dataclass(frozen=True)
class DayWindows:
    day: dt.date
    tickers: list[str]
    log_price: np.ndarray  # [n, 65]
    log_volume: np.ndarray  # [n, 64]
    times: np.ndarray | None  # [n, 65] knot times (calendar time unit) or None (sessions)
    n_missing_price: np.ndarray
    n_missing_volume: np.ndarray
    raw_inputs_digest: str


def day_windows(settings: Settings, panel: Panel, day: dt.date) -> DayWindows:
    """The admitted windows ending on ``day`` (rows in ticker order)."""
    cfg = settings.tokenize
    i = panel.sessions.index(day)
    lo = i - LOOKBACK
    price = np.full((len(panel.tickers), N_KNOTS), np.nan)
    volume = np.full((len(panel.tickers), N_TOKENS), np.nan)
    first = max(lo, 0)
    price[:, first - lo :] = panel.log_close[first : i + 1].T
    vfirst = max(lo + 1, 0)
    volume[:, vfirst - lo - 1 :] = panel.log_volume[vfirst : i + 1].T
    missing_p = np.isnan(price).sum(axis=1)
    missing_v = np.isnan(volume).sum(axis=1)
    admit = (
        ~np.isnan(price[:, -1]) & (missing_p <= cfg.max_missing_price) & (N_TOKENS - missing_v >= cfg.min_valid_volume)
    )
    times = None
    if cfg.time_unit == "calendar":
        dates = [panel.sessions[k] for k in range(first, i + 1)]
        if lo < 0:
            raise ValueError(f"calendar time needs 64 sessions of history before {day}")
        offsets = np.array([(d - dates[0]).days for d in dates], dtype=np.float64) / CALENDAR_DAYS_PER_SESSION
        times = np.broadcast_to(offsets, (int(admit.sum()), N_KNOTS)).copy()
    inputs_digest = digest(panel.raw_hashes[first : i + 1])
    idx = np.flatnonzero(admit)
    return DayWindows(
        day=day,
        tickers=[panel.tickers[k] for k in idx],
        log_price=np.ascontiguousarray(price[idx]),
        log_volume=np.ascontiguousarray(volume[idx]),
        times=times,
        n_missing_price=missing_p[idx].astype(np.int8),
        n_missing_volume=missing_v[idx].astype(np.int8),
        raw_inputs_digest=inputs_digest,
    )


def shard_frame(
    tok: Tokenization, windows: DayWindows, tokens: np.ndarray, extras: dict[str, np.ndarray]
) -> pl.DataFrame:
    """One day's shard of ``tok`` (``tok.shard_schema``): ``tokens`` and its ``extras`` columns, a row per window."""
    schema = tok.shard_schema
    frame = pl.DataFrame(
        {
            "ticker": pl.Series(windows.tickers, dtype=pl.String),
            "date": pl.Series([windows.day] * len(windows.tickers), dtype=pl.Date),
            "n_missing_price": pl.Series(windows.n_missing_price, dtype=pl.Int8),
            "n_missing_volume": pl.Series(windows.n_missing_volume, dtype=pl.Int8),
            "tokens": pl.Series(tokens, dtype=schema["tokens"]),
        }
    )
    if extras:
        frame = frame.with_columns(pl.Series(name, extras[name], dtype=schema[name]) for name in tok.extra_columns)
    return frame


def _concat(windows: list[DayWindows]) -> DayWindows:
    """All windows of several days as one batch (day and digest are per-day facts: left empty)."""
    times = None if windows[0].times is None else np.concatenate([w.times for w in windows])
    return DayWindows(
        day=windows[0].day,
        tickers=[t for w in windows for t in w.tickers],
        log_price=np.concatenate([w.log_price for w in windows]),
        log_volume=np.concatenate([w.log_volume for w in windows]),
        times=times,
        n_missing_price=np.concatenate([w.n_missing_price for w in windows]),
        n_missing_volume=np.concatenate([w.n_missing_volume for w in windows]),
        raw_inputs_digest="",
    )


def _blocks(days: list[dt.date], size: int) -> Iterator[list[dt.date]]:
    for k in range(0, len(days), size):
        yield days[k : k + size]


@dataclass(frozen=True)
class TokensSummary:
    """What materializing one token asset wrote: its manifest rows (TOKEN_MANIFEST_SCHEMA) of ``days``."""

    kind: str
    manifest: pl.DataFrame
    days: tuple[dt.date, ...]  # sorted
    time_unit: str
    path: Path  # the asset's folder in the warehouse
    seconds: float = 0.0  # the whole stage call (every kind of it)

    def metadata(self) -> dict:
        """What a token asset's materialization shows (plain values; the asset turns them into Dagster's)."""
        manifest, days = self.manifest, self.days
        windows = int(manifest["windows"].sum())
        return {
            "windows": windows,
            "date_range": f"{days[0]} .. {days[-1]} ({len(days)} sessions)",
            "content_hash": combined_hash(manifest["content_hash"].to_list()),
            "raw_inputs_digest": combined_hash(manifest["raw_inputs_digest"].to_list()),
            "alpha_price": manifest["alpha_price"][0],
            "alpha_volume": manifest["alpha_volume"][0],
            "time_unit": self.time_unit,
            "stage_seconds": round(self.seconds, 2),
            "warehouse_path": self.path,
            "dagster/row_count": windows,
        }


def materialize_tokens(
    settings: Settings,
    days: list[dt.date],
    tokenizations: tuple[Tokenization, ...] | None = None,
    alphas: AlphaLookup | None = None,
    progress: bool = True,
) -> dict[str, TokensSummary]:
    """Write the token shards of ``days`` of each of ``tokenizations`` (default: the run's,
    ``tokenize.tokenizations``); return each token asset's summary."""
    started = time.perf_counter()
    toks = chosen(settings.tokenize.tokenizations) if tokenizations is None else tuple(tokenizations)
    days = sorted(days)
    alphas = alphas or AlphaLookup.from_settings(settings)
    wh = settings.warehouse
    records: dict[str, list[dict]] = {t.tokens_asset: [] for t in toks}
    bar = tqdm(total=len(days), desc="token shards", unit="day", disable=not progress)
    workspaces = (Workspace(), Workspace())
    with ThreadPoolExecutor(max_workers=settings.tokenize.write_threads) as pool:
        pending: list = []
        for number, block in enumerate(_blocks(days, settings.tokenize.block_days)):
            # Two workspaces: block k is computed while block k-1's shards are still being written.
            workspace = workspaces[number % 2]
            panel = load_panel(settings, block[0], block[-1])
            per_day = [day_windows(settings, panel, day) for day in block]
            merged = _concat(per_day)  # one kernel call per block: the kernels parallelize across windows
            bounds = np.cumsum([0] + [len(w.tickers) for w in per_day])
            jobs = []
            for tok in toks:
                kind = tok.tokens_asset
                tokens, extras = tok.tokenize(merged, alphas, workspace)
                for k, windows in enumerate(per_day):
                    rows = slice(bounds[k], bounds[k + 1])
                    frame = shard_frame(tok, windows, tokens[rows], {c: v[rows] for c, v in extras.items()})
                    meta = {
                        "kind": kind,
                        "partition_date": windows.day,
                        "windows": frame.height,
                        "raw_inputs_digest": windows.raw_inputs_digest,
                        **tok.parameters(alphas),
                        "time_unit": settings.tokenize.time_unit,
                        "code_version": __version__,
                    }
                    jobs.append(
                        pool.submit(
                            wh.write_shard, kind, windows.day, frame, meta, TOKEN_MANIFEST_SCHEMA, TOKEN_COMPRESSION
                        )
                    )
            _collect(pending, records, bar)  # the previous block's buffers are free again
            pending = [(len(block), jobs)]
        _collect(pending, records, bar)
    bar.close()
    for tok in toks:
        wh.ensure_unit_views(tok.tokens_asset, {tok.tokens_asset: tok.shard_schema, "manifest": TOKEN_MANIFEST_SCHEMA})
    seconds = time.perf_counter() - started
    return {
        k: TokensSummary(
            kind=k,
            manifest=pl.DataFrame(v, schema=TOKEN_MANIFEST_SCHEMA).sort("partition_date"),
            days=tuple(days),
            time_unit=settings.tokenize.time_unit,
            path=wh / k,
            seconds=seconds,
        )
        for k, v in records.items()
    }


def _collect(pending: list, records: dict[str, list[dict]], bar) -> None:
    for n_days, jobs in pending:
        for job in jobs:
            record = job.result()
            records[record["kind"]].append({k: record[k] for k in TOKEN_MANIFEST_SCHEMA})
        bar.update(n_days)
