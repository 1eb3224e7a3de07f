"""The labels stage: each of the run's tasks' target (``settings.tasks``: Buy/Sell/Hold at each tau), for the
windows ending on each trading day.

The label of day t needs the sessions after it that the run's tasks read (``Settings.label_horizon``; Buy/Sell/Hold
reads one: the paper's r_j = c0(t_j+1) - c0(t_j)), so day t's shard reads the spline_tokens and raw_ohlcv shards of t
and of those sessions only; where a session is not materialized yet, the returns and targets that read it are
unknown (NaN / -1) until it is. The next session's two returns are stored
(``r_spline``: end-of-window positions of consecutive causal fits; ``r_close``: close-to-close, what the
backtest trades); a task's label column uses the returns it names (``Task.returns``: the volatility task's are
close-to-close) or else ``tokenize.label_source``, recorded in ``label_source``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl
from tqdm.auto import tqdm

from kinematic_pipeline import __version__
from kinematic_pipeline.config import Settings
from kinematic_pipeline.pins import label_inputs_digest, label_sessions, verified_labels
from kinematic_pipeline.report.markdown import Markdown, markdown_table
from kinematic_pipeline.tasks.actions import ACTION_KEYS, UNKNOWN_LABEL
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.tasks.buy_sell_hold import tau_column
from kinematic_pipeline.tasks.targets import label_returns_close, label_returns_spline
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.warehouse import LABELS
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import combined_hash


def labels_schema(tasks: tuple[Task, ...]) -> dict[str, pl.DataType]:
    """The labels asset's columns: the day's returns, then each of the run's tasks' target (``Task.label_column``)."""
    return {
        "ticker": pl.String,
        "date": pl.Date,
        "r_spline": pl.Float64,
        "r_close": pl.Float64,
        "label_source": pl.String,
        **{task.label_column: task.target_dtype for task in tasks},
    }


MANIFEST_SCHEMA: dict[str, pl.DataType] = {
    "partition_date": pl.Date,
    "next_date": pl.Date,
    "windows": pl.Int64,
    "known": pl.Int64,  # windows whose next-day return exists
    "content_hash": pl.String,
    "inputs_digest": pl.String,  # content hashes of the spline_tokens and raw_ohlcv shards read
    "code_version": pl.String,
}


def _read(settings: Settings, asset: str, day: dt.date, schema: dict[str, pl.DataType], required: bool) -> pl.DataFrame:
    """The shard's columns; an empty frame when it does not exist and is not required."""
    path = settings.warehouse.shard(asset, day)
    if path.exists():
        (path,) = settings.warehouse.verified_shards(asset, [day])  # its manifest's bytes, or an error naming it
        return exact.read_parquet(path, columns=list(schema))
    if required:
        raise FileNotFoundError(f"{asset} partition {day} is not materialized (no {path})")
    return pl.DataFrame(schema=schema)


class ShardReads:
    """The shards one labels run reads, each read and checked against its manifest once: day t's labels read the
    shards of t and of the ``label_horizon`` sessions after it, so a shard is wanted by up to horizon + 1 days in a
    row (the next-week volatility task: 6; read each time, they were 80% of the demo's labels step). ``forget_before``
    drops the days no later day reads (the days go in order)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.frames: dict[tuple[str, dt.date], pl.DataFrame] = {}

    def read(self, asset: str, day: dt.date, schema: dict[str, pl.DataType], required: bool) -> pl.DataFrame:
        key = (asset, day)
        if key not in self.frames:
            self.frames[key] = _read(self.settings, asset, day, schema, required)
        return self.frames[key]

    def forget_before(self, day: dt.date) -> None:
        self.frames = {key: frame for key, frame in self.frames.items() if key[1] >= day}


def day_labels(settings: Settings, day: dt.date, reads: ShardReads | None = None) -> tuple[pl.DataFrame, dt.date, str]:
    """Labels of the windows ending on ``day`` (LABELS schema), the next session, and the inputs' digest.

    The day's shards and those of the ``settings.label_horizon`` sessions after it are read (through ``reads``, the
    run's, when given): a task's ``target`` gets one return per session ahead (``forward_returns``), NaN where a
    session is not materialized yet."""
    cfg, wh = settings.tokenize, settings.warehouse
    sessions = label_sessions(day, settings.label_horizon)
    spline, close = forward_returns(settings, sessions, reads or ShardReads(settings))
    frame = spline.select("ticker").with_columns(
        pl.Series("r_spline", spline["r1"].to_numpy()), pl.Series("r_close", close["r1"].to_numpy())
    )
    forward = {"spline": spline.drop("ticker").to_numpy(), "close": close.drop("ticker").to_numpy()}
    out = frame.select(
        "ticker",
        pl.lit(day).alias("date"),
        "r_spline",
        "r_close",
        pl.lit(cfg.label_source).alias("label_source"),
    ).with_columns(
        *[
            pl.Series(t.label_column, t.target(forward[t.returns or cfg.label_source][:, : t.horizon]), t.target_dtype)
            for t in settings.tasks
        ]
    )
    return out.sort("ticker"), sessions[1], label_inputs_digest(wh, sessions)


def forward_returns(
    settings: Settings, sessions: list[dt.date], reads: ShardReads
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The returns of the tickers of ``sessions[0]`` (its token shard: the windows ending that day) over each of the
    sessions after it: ``ticker``, ``r1`` .. ``rH``, from consecutive causal fits' end positions (the spline
    returns) and from the closes; NaN where a session's shard or a ticker's bar is missing (the newest days)."""
    positions = {"ticker": pl.String, "end_position": pl.Float64}
    closes = {"ticker": pl.String, "close": pl.Float64}
    today = reads.read(SPLINE.tokens_asset, sessions[0], positions, required=True)
    frame = today.join(reads.read("raw_ohlcv", sessions[0], closes, required=True), on="ticker", how="left")
    for k, session in enumerate(sessions[1:], start=1):  # the sessions ahead may not exist yet: unknown
        frame = frame.join(
            reads.read(SPLINE.tokens_asset, session, positions, required=False).rename({"end_position": f"end{k}"}),
            on="ticker",
            how="left",
        ).join(
            reads.read("raw_ohlcv", session, closes, required=False).rename({"close": f"close{k}"}),
            on="ticker",
            how="left",
        )
    frame = frame.rename({"end_position": "end0", "close": "close0"})
    log_close = frame.select(pl.col(f"close{k}").log() for k in range(len(sessions)))  # a missing bar: NaN below
    spline, close = frame.select("ticker"), frame.select("ticker")
    for k in range(1, len(sessions)):
        spline = spline.with_columns(
            pl.Series(f"r{k}", label_returns_spline(frame[f"end{k - 1}"].to_numpy(), frame[f"end{k}"].to_numpy()))
        )
        close = close.with_columns(
            pl.Series(
                f"r{k}",
                label_returns_close(log_close[f"close{k - 1}"].to_numpy(), log_close[f"close{k}"].to_numpy()),
            )
        )
    return spline, close


@dataclass(frozen=True)
class LabelsSummary:
    """What materializing labels wrote: the manifest rows (MANIFEST_SCHEMA) of ``days``."""

    manifest: pl.DataFrame
    days: tuple[dt.date, ...]
    settings: Settings  # the distribution in the metadata reads the written shards back

    def metadata(self) -> dict:
        """What the labels asset's materialization shows (plain values)."""
        manifest = self.manifest
        return {
            "windows": int(manifest["windows"].sum()),
            "known_next_day": int(manifest["known"].sum()),
            "label_source": self.settings.tokenize.label_source,
            "distribution": Markdown(markdown_table(label_distribution(self.settings, list(self.days)))),
            "content_hash": combined_hash(manifest["content_hash"].to_list()),
            "dagster/row_count": int(manifest["windows"].sum()),
        }


def materialize_labels(settings: Settings, days: list[dt.date], progress: bool = True) -> LabelsSummary:
    wh = settings.warehouse
    records = []
    reads = ShardReads(settings)
    for day in tqdm(sorted(days), desc="labels", unit="day", disable=not progress):
        reads.forget_before(day)
        frame, nxt, inputs_digest = day_labels(settings, day, reads)
        known = frame["r_spline" if settings.tokenize.label_source == "spline" else "r_close"].is_not_nan().sum()
        record = {
            "partition_date": day,
            "next_date": nxt,
            "windows": frame.height,
            "known": int(known),
            "inputs_digest": inputs_digest,
            "code_version": __version__,
        }
        records.append(wh.write_shard(LABELS, day, frame, record, MANIFEST_SCHEMA))
    wh.ensure_unit_views(LABELS, {LABELS: labels_schema(settings.tasks), "manifest": MANIFEST_SCHEMA})
    return LabelsSummary(pl.DataFrame(records, schema=MANIFEST_SCHEMA), tuple(days), settings)


def label_distribution(settings: Settings, days: list[dt.date]) -> pl.DataFrame:
    """Counts of Buy/Sell/Hold/unknown per tau over ``days`` (for metadata)."""
    frame = exact.read_parquet(verified_labels(settings, days))
    rows = []
    for tau in settings.tokenize.taus:
        col = frame[tau_column(tau)]
        rows.append(
            {
                "tau": tau,
                **{name: int((col == code).sum()) for code, name in enumerate(ACTION_KEYS)},
                "unknown": int((col == UNKNOWN_LABEL).sum()),
            }
        )
    return pl.DataFrame(rows)
