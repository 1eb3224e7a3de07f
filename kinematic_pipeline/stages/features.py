"""<tokenization>_features: the decision-time features of every ticker-day, for the probes and rules.

Two Parquet files per tokenization (``features/<tokenization>/training.parquet`` and ``test.parquet``), one row
per window; a probe pins the training file's hash, so new test days never make a fitted probe stale:

- ``split``: ``train`` and ``validation`` rows are the window store's (days on or before the last fold's
  training end; the last ``train.val_fraction`` of its days validate, the fine-tuning's split), ``test`` rows
  every ticker of every token shard of every fold's test period (the whole universe, not only the backtested
  names). A fold reads its own rows (``read_features``): the training rows up to its training
  end, split again by its own dates (``window_store.fold_split``), the test rows of its test period;
- the features (``Tokenization.features``: the last five tokens and window std; the raw tokens' file also ret1,
  vol20 and ret20);
- the close of the day (every fold's validation rows and the test rows: what a backtest trades) and the labels of every
  task of the run (each tau's; next week's log variance with the volatility task) with ``r_close`` and ``r_spline``
  (evaluation only: no feature reads them).

Beside them ``features/<tokenization>/inputs.parquet`` lists what it was built from (the store's tokens file and
every test-period token and raw_ohlcv shard, with hashes; each path relative to the warehouse root, so a copied or
moved warehouse traces its own files): the test shards of every probe's provenance; and
``cut.json`` the walk-forward folds the files were split for: a reader under other folds (a new ``KP_TRAIN_END``,
``KP_FOLDS``) refuses them, naming the asset to re-materialize (``check_features_cut``); and ``days.parquet`` the
content hash of every token and raw_ohlcv day behind the rows (the training rows' store days and the test days, the
64-session look-back and the next session their labels read): a reader refuses the files once one of those days was
re-materialized (a restated bar re-ingested, its tokens and labels rebuilt; ``check_features_inputs``), so the probes
never keep trading an old bar. No dagster here.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from tqdm import tqdm

from kinematic_pipeline.calendar import session_before
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import Fold, evaluation_days, split_days
from kinematic_pipeline.model_pins import warehouse_path
from kinematic_pipeline.pins import (
    StalePairError,
    check_token_inputs,
    current_hashes,
    features_path,
    rematerialize,
    verified_labels,
)
from kinematic_pipeline.tokenizations import Tokenization
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse import LABELS, RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import write_bytes_atomic
from kinematic_pipeline.warehouse.layout import INPUTS_SCHEMA
from kinematic_pipeline.warehouse.verified import verify_recorded, write_record
from kinematic_pipeline.window_store import fold_split, open_store
from kinematic_pipeline.windows import LOOKBACK, N_TOKENS

CHUNK_WINDOWS = 131_072  # store rows turned into features at a time (~300 MB of tokens)
TEST_DAYS_PER_READ = 64
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class FeaturesSummary:
    tokenization: str
    path: Path
    rows: dict[str, int]  # split -> rows
    seconds: float

    def metadata(self) -> dict:
        return {
            **{f"{split}_rows": n for split, n in self.rows.items()},
            "path": self.path,
            "stage_seconds": round(self.seconds, 1),
            "dagster/row_count": sum(self.rows.values()),
        }


def _store_rows(settings: Settings, tok: Tokenization, progress: bool) -> tuple[pl.DataFrame, dict]:
    store, asset = open_store(settings, tok), tok.tokens_asset
    _, validation = split_days(store.days["date"].to_list(), settings.train.val_fraction)
    parts, total = [], store.manifest["windows"]
    bar = tqdm(total=total, desc=f"{asset} features (training period)", unit="window", disable=not progress)
    for lo in range(0, total, CHUNK_WINDOWS):
        hi = min(total, lo + CHUNK_WINDOWS)
        parts.append(pl.DataFrame(tok.features(store.read(np.arange(lo, hi)))))  # plain reads: no mapped pages
        bar.update(hi - lo)
    bar.close()
    frame = pl.concat([store.rows.select("ticker", "date", "finite"), pl.concat(parts)], how="horizontal")
    split = pl.when(pl.col("date").is_in(validation)).then(pl.lit("validation")).otherwise(pl.lit("train"))
    frame = frame.filter(pl.col("finite")).drop("finite").with_columns(split.alias("split"))
    store_input = {
        "asset": tok.window_store_asset,
        "date": "",
        "path": warehouse_path(settings.warehouse, store.path),
        "content_hash": store.manifest["tokens_sha256"],
    }
    return frame, store_input


def _test_rows(settings: Settings, tok: Tokenization, days: list[dt.date], progress: bool) -> pl.DataFrame:
    wh, asset, parts = settings.warehouse, tok.tokens_asset, []
    check_token_inputs(settings, asset, days)  # tokenized from the raw days on disk now, look-back included
    bar = tqdm(total=len(days), desc=f"{asset} features (test period)", unit="day", disable=not progress)
    for lo in range(0, len(days), TEST_DAYS_PER_READ):
        block = days[lo : lo + TEST_DAYS_PER_READ]
        frame = exact.read_parquet(wh.verified_shards(asset, block), columns=["ticker", "date", "tokens"])
        if frame.height:
            tokens = frame["tokens"].to_numpy().reshape(-1, N_TOKENS, tok.n_channels)
            parts.append(
                pl.concat([frame.select("ticker", "date"), pl.DataFrame(tok.features(tokens))], how="horizontal")
            )
        bar.update(len(block))
    bar.close()
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts).with_columns(pl.lit("test").alias("split"))


def read_features(
    settings: Settings,
    variant: str,
    scope: Fold,
    splits: tuple[str, ...],
    extra: tuple[str, ...] = (),
) -> pl.DataFrame:
    """The rows of ``splits`` of the variant's features for the fold ``scope`` (a ``Policy.fold``), with its feature
    columns and ``extra``: ``("test",)`` the test file's rows of the fold's test period; otherwise the training
    file's rows on or before the fold's training end, split by the fold's own dates (``window_store.fold_split``),
    with every label of a day after the fold's ``label_end`` (the purge) set to null."""
    part = "test" if splits == ("test",) else "training"
    spec, path = lookup_variant(variant), features_path(settings, variant, part)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: materialize {spec.features_asset} (what {variant} reads)")
    verify_recorded(path, f"re-materialize {spec.features_asset}")  # the bytes written, or refused naming the file
    check_features_cut(settings, spec.tokenization)  # split for this run's folds, or refused
    # built from the token and raw days on disk now, or refused
    check_features_inputs(settings, spec.tokenization, path)
    columns = spec.feature_columns
    scan = exact.scan_parquet(path)
    date = pl.col("date")
    if part == "test":
        in_fold = (
            date >= scope.test_start if scope.test_end is None else date.is_between(scope.test_start, scope.test_end)
        )
        scan = scan.filter(in_fold)
    else:
        _, validation = fold_split(settings, spec.token_asset, scope)
        split = pl.when(date.is_in(validation)).then(pl.lit("validation")).otherwise(pl.lit("train"))
        labels = [c for c in extra if c in {t.label_column for t in settings.tasks}]
        purged = [pl.when(date > scope.label_end).then(None).otherwise(pl.col(c)).alias(c) for c in labels]
        scan = scan.filter(date <= scope.train_end).with_columns(split.alias("split"), *purged)
    return scan.filter(pl.col("split").is_in(splits)).select("ticker", "date", "split", *columns, *extra).collect()


def _closes(settings: Settings, days: list[dt.date]) -> pl.DataFrame:
    """ticker, date, close of raw_ohlcv on ``days`` (a day unit's partition is its folder's date)."""
    wh = settings.warehouse
    present = [d for d in days if wh.shard(RAW_OHLCV, d).exists()]
    if not present:
        return pl.DataFrame(schema={"ticker": pl.String, "date": pl.Date, "close": pl.Float64})
    day_of = pl.LazyFrame({"_file": [str(wh.shard(RAW_OHLCV, d)) for d in present], "date": present})
    return (
        exact.scan_parquet(wh.verified_shards(RAW_OHLCV, present), include_file_paths="_file")
        .select("ticker", "close", "_file")
        .join(day_of, on="_file")
        .drop("_file")
        .collect()
    )


def _labels(settings: Settings, days: list[dt.date]) -> pl.DataFrame:
    wh = settings.warehouse
    columns = ["ticker", "date", *(t.label_column for t in settings.tasks), "r_close", "r_spline"]
    present = [d for d in days if wh.shard(LABELS, d).exists()]
    if not present:
        return pl.DataFrame(schema={c: (pl.String if c == "ticker" else pl.Date) for c in columns[:2]})
    return exact.scan_parquet(verified_labels(settings, present)).select(columns).collect()


def features_cut(settings: Settings) -> dict:
    """What the features files are split for: every walk-forward fold's training end, purge and test period."""
    folds = [
        {
            "fold": f.label,
            "train_end": str(f.train_end),
            "label_end": str(f.label_end),
            "test_start": str(f.test_start),
            "test_end": None if f.test_end is None else str(f.test_end),
        }
        for f in settings.folds
    ]
    return {"folds": folds}


def _cut_text(cut: dict) -> str:
    return ", ".join(f"{f['fold']}: train to {f['train_end']}, test {f['test_start']}.." for f in cut["folds"])


def check_features_cut(settings: Settings, tok: Tokenization) -> None:
    """A ValueError naming the asset to re-materialize unless ``tok``'s features were built for the folds
    ``settings`` give (a probe fitted or scored on another cut's rows would silently test another period)."""
    path, asset = settings.warehouse.features_cut_file(tok.name), tok.features_asset
    if not path.exists():
        raise ValueError(f"{path} is missing (features built by an older version): re-materialize {asset}")
    try:
        recorded = json.loads(path.read_text())
        recorded_folds = recorded["folds"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a cut record ({type(exc).__name__}: {exc}): re-materialize {asset}") from None
    expected = features_cut(settings)
    if recorded_folds != expected["folds"]:
        raise ValueError(
            f"{asset} was built for other folds ({_cut_text(recorded)}) than this run's ({_cut_text(expected)}; "
            f"KP_TRAIN_END / KP_FOLDS): re-materialize {asset}"
        )


def _days_built_from(settings: Settings, asset: str, days: list[dt.date]) -> pl.DataFrame:
    """asset, date, content_hash of every ``asset`` and raw_ohlcv day the rows of ``days`` read: their windows'
    look-back and the session after the last (its labels' next day), as the manifests hold them now."""
    wh, rows = settings.warehouse, []
    first = max(settings.data.start_date, session_before(min(days), LOOKBACK))
    for name in (asset, RAW_OHLCV):
        have = wh.manifest_days(name)
        read = [d for d in have if first <= d <= max(days)] + [d for d in have if d > max(days)][:1]
        rows += [{"asset": name, "date": d, "content_hash": h} for d, h in zip(read, current_hashes(wh, name, read))]
    return pl.DataFrame(rows, schema={"asset": pl.String, "date": pl.Date, "content_hash": pl.String})


def check_features_inputs(settings: Settings, tok: Tokenization, path: Path) -> None:
    """``StalePairError`` in one line naming ``tok``'s features file ``path``, the first token or raw day
    re-materialized since it was built and the fix (re-materialize its features); a ValueError when it records none."""
    wh = settings.warehouse
    record, fix = wh.features_days_file(tok.name), rematerialize(tok.features_asset)
    if not record.exists():
        raise ValueError(f"{record} is missing (features built by an older version): {fix}")
    built = exact.read_parquet(record)
    for name in built["asset"].unique(maintain_order=True).to_list():
        rows = built.filter(pl.col("asset") == name)
        days = rows["date"].to_list()
        stale = [(d, a, b) for d, a, b in zip(days, rows["content_hash"], current_hashes(wh, name, days)) if a != b]
        if stale:
            day, was, now = stale[0]
            more = f" (and {len(stale) - 1} more day(s) through {stale[-1][0]})" if len(stale) > 1 else ""
            raise StalePairError(
                f"{path} was built from the {name} shard of {day}{more} sha256 {was[:16]}, now {now[:16] or 'missing'} "
                f"(re-materialized since: a restated bar, re-tokenized days): {fix}"
            )


def materialize_features(settings: Settings, tok: Tokenization, progress: bool = True) -> FeaturesSummary:
    """Write the features file of ``tok`` and the list of its inputs."""

    started, wh, asset, tokenization = time.perf_counter(), settings.warehouse, tok.tokens_asset, tok.name
    train, store_input = _store_rows(settings, tok, progress)
    test_days = evaluation_days(settings, asset)  # every fold's test period
    test = _test_rows(settings, tok, test_days, progress)
    frame = pl.concat([train, test], how="diagonal_relaxed") if test.height else train
    validation_days = {d for fold in settings.folds for d in fold_split(settings, asset, fold)[1]}
    closes = _closes(settings, sorted(validation_days | set(test_days)))
    frame = frame.join(closes, on=["ticker", "date"], how="left", maintain_order="left")
    frame = frame.join(
        _labels(settings, frame["date"].unique().sort().to_list()),
        on=["ticker", "date"],
        how="left",
        maintain_order="left",
    )
    frame = frame.select("ticker", "date", "split", "close", pl.exclude("ticker", "date", "split", "close"))
    path = wh.features_file(tokenization, "training")
    is_test = pl.col("split") == "test"
    for part, rows in ((path, frame.filter(~is_test)), (wh.features_file(tokenization, "test"), frame.filter(is_test))):
        write_record(part, wh.write(rows, part), wh.durable)  # a reader verifies the bytes (verify_recorded)
    inputs = [store_input] + [
        {"asset": a, "date": str(d), "path": warehouse_path(wh, wh.shard(a, d)), "content_hash": h}
        for a in (asset, RAW_OHLCV)
        for d, h in zip(test_days, wh.content_hashes(a, test_days))
    ]
    wh.write(pl.DataFrame(inputs, schema=INPUTS_SCHEMA), wh.features_inputs_file(tokenization))
    wh.write(_days_built_from(settings, asset, frame["date"].unique().to_list()), wh.features_days_file(tokenization))
    write_bytes_atomic(wh.features_cut_file(tokenization), json.dumps(features_cut(settings), indent=1).encode())
    rows = {s: int((frame["split"] == s).sum()) for s in SPLITS}
    return FeaturesSummary(tokenization, path, rows, time.perf_counter() - started)
