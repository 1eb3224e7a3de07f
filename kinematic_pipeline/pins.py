"""Pins: what a derived day shard was built from, and the check on read that it still holds.

A labels shard of day t is built from the spline_tokens and raw_ohlcv shards of t and of the next session
(``stages/labels.py``); its manifest records their content hashes' digest (``inputs_digest``) and the next
session (``next_date``). ``verified_labels`` re-derives that digest from the manifests on disk now and refuses a
day whose inputs were re-materialized since (a corrected bar, a re-tokenized day), naming the day and the
partition to re-materialize, before it checks the labels' own bytes. A day whose next session did not exist
when it was built recorded "" for it, and still holds while that session is missing.

The current content hashes come from the inputs' manifests, read once per process and cached by each
manifest's (path, size, mtime_ns): a rewritten manifest is a new file (atomic rename), so its stat differs.
Uncached, the check reads 3 x 5,787 manifests on ``real`` in about 3 s; cached, it stats them. No dagster here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import polars as pl

from kinematic_pipeline.calendar import session_before, sessions_after, trading_days
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import Fold
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.probe_models import (
    LinearProbeModel,
    ProbeModel,
    TreeProbeModel,
)
from kinematic_pipeline.tokenizations import SPLINE, Tokenization
from kinematic_pipeline.variants import BENCHMARK
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse import LABELS, MARGIN_BACKTESTS, PREDICTIONS, RAW_OHLCV, Warehouse
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import digest, file_sha256, write_bytes_atomic
from kinematic_pipeline.warehouse.verified import process_sha256, verify_recorded
from kinematic_pipeline.windows import LOOKBACK


class StalePairError(ValueError):
    """A derived artefact was built from another version of its input than the one on disk now."""


def rematerialize(asset: str, partition: str | None = None) -> str:
    """The fix every pin's error ends with: ``re-materialize <asset>[ partition <key>]``."""
    return f"re-materialize {asset}" + ("" if partition is None else f" partition {partition}")


LABEL_INPUTS = (SPLINE.tokens_asset, RAW_OHLCV)  # the shards a labels day reads, of the day and of the next session
_HASHES: dict[str, tuple[tuple[int, int], str]] = {}  # manifest path -> ((size, mtime_ns), content_hash)


def current_hashes(wh: Warehouse, asset: str, days: list[dt.date]) -> list[str]:
    """The content hash each day's manifest of ``asset`` records now ("" where there is none), cached by stat."""
    out: dict[dt.date, str] = {}
    todo: list[tuple[dt.date, Path, tuple[int, int]]] = []
    for day in dict.fromkeys(days):
        path = wh.manifest(asset, day)
        try:
            st = path.stat()
        except FileNotFoundError:
            out[day] = ""
            continue
        stamp, hit = (st.st_size, st.st_mtime_ns), _HASHES.get(str(path))
        if hit is not None and hit[0] == stamp:
            out[day] = hit[1]
        else:
            todo.append((day, path, stamp))
    for (day, path, stamp), content in zip(todo, wh.content_hashes(asset, [d for d, _, _ in todo])):
        _HASHES[str(path)] = (stamp, content)
        out[day] = content
    return [out[d] for d in days]


def label_sessions(day: dt.date, horizon: int) -> list[dt.date]:
    """The sessions a labels shard of ``day`` reads: the day and the ``horizon`` sessions after it."""
    return [day, *sessions_after(day, horizon)]


def label_inputs_digest(wh: Warehouse, sessions: list[dt.date]) -> str:
    """The digest a labels shard records: its inputs' content hashes (``LABEL_INPUTS``) of each of ``sessions``
    (``label_sessions``: the day and the sessions after it its targets read)."""
    return _digests(wh, [sessions])[0]


def _digests(wh: Warehouse, groups: list[list[dt.date]]) -> list[str]:
    days = [d for group in groups for d in group]
    hashes = {asset: current_hashes(wh, asset, days) for asset in LABEL_INPUTS}
    out, first = [], 0
    for group in groups:
        out.append(digest([hashes[a][first + k] for a in LABEL_INPUTS for k in range(len(group))]))
        first += len(group)
    return out


def stale_label_days(settings: Settings, days: list[dt.date]) -> list[tuple[dt.date, dt.date, str, str]]:
    """(day, last session read, recorded digest, current digest) of each labels day whose inputs changed since."""
    if not days:
        return []
    wh, horizon = settings.warehouse, settings.label_horizon
    rows = wh.manifest_rows(LABELS, days, ["inputs_digest"])
    groups = [label_sessions(d, horizon) for d in days]
    current = _digests(wh, groups)
    return [
        (d, group[-1], r["inputs_digest"], now)
        for d, group, r, now in zip(days, groups, rows, current)
        if r["inputs_digest"] != now
    ]


def verified_labels(settings: Settings, days: list[dt.date]) -> list[Path]:
    """The labels shards of ``days``, after checking that each was built from the token and raw shards on disk
    now (``StalePairError`` naming the first stale day, its inputs and the fix) and that its bytes are the ones
    its manifest records (``Warehouse.verified_shards``)."""
    wh = settings.warehouse
    stale = stale_label_days(settings, sorted(days))
    if stale:
        day, nxt, recorded, now = stale[0]
        more = f" (and {len(stale) - 1} more day(s) through {stale[-1][0]})" if len(stale) > 1 else ""
        raise StalePairError(
            f"labels shard of {day}{more} was built from {' and '.join(LABEL_INPUTS)} of {day} through {nxt} whose "
            f"digest "
            f"was {recorded[:16] or '-'}; those shards now digest to {now[:16]} (re-materialized since). "
            f"Re-materialize labels for {day}{' onwards' if more else ''} "
            "(python -m kinematic_pipeline materialize --select labels)"
        )
    return wh.verified_shards(LABELS, days)


# token shards: tokenized from the raw_ohlcv days behind their windows (look-back included)


def current_raw_digests(settings: Settings, days: list[dt.date]) -> dict[dt.date, str]:
    """The ``raw_inputs_digest`` a token shard of each of ``days`` would record from the raw_ohlcv manifests as
    they are now (the same sessions as ``day_windows``: ``max(start, day - 64 sessions) .. day``; a missing raw
    day counts as ""). One read of the manifests of the whole range."""
    if not days:
        return {}
    wh = settings.warehouse
    days = sorted(days)
    start = settings.data.start_date
    sessions = trading_days(max(start, session_before(days[0], LOOKBACK)), days[-1])
    present = set(wh.manifest_days(RAW_OHLCV))
    have = [s for s in sessions if s in present]
    by_day = dict(zip(have, wh.content_hashes(RAW_OHLCV, have)))
    hashes = [by_day.get(s, "") for s in sessions]
    index = {s: k for k, s in enumerate(sessions)}
    out = {}
    for day in days:
        first = index.get(max(start, session_before(day, LOOKBACK)), 0)
        out[day] = digest(hashes[first : index[day] + 1]) if day in index else ""
    return out


def stale_token_days(settings: Settings, kind: str, days: list[dt.date]) -> list[tuple[dt.date, str, str]]:
    """(day, recorded, current) for each of ``days`` whose ``kind`` shard was tokenized from raw_ohlcv days whose
    bytes have changed since (re-ingested: a corrected bar, a new file); [] when every pair still holds."""
    if not days:
        return []
    days = sorted(days)
    recorded = settings.warehouse.manifest_rows(kind, days, ["raw_inputs_digest"])
    current = current_raw_digests(settings, days)
    return [
        (d, r["raw_inputs_digest"], current[d]) for d, r in zip(days, recorded) if r["raw_inputs_digest"] != current[d]
    ]


def check_token_inputs(settings: Settings, kind: str, days: list[dt.date]) -> None:
    """``StalePairError`` naming both digests, the raw days and the partition to re-materialize when a ``kind``
    shard of ``days`` no longer matches the raw_ohlcv days behind its windows (look-back included)."""
    stale = stale_token_days(settings, kind, days)
    if stale:
        day, recorded, current = stale[0]
        first = max(settings.data.start_date, session_before(day, LOOKBACK))
        more = f" (and {len(stale) - 1} more day(s) through {stale[-1][0]})" if len(stale) > 1 else ""
        raise StalePairError(
            f"{kind} shard of {day}{more} was tokenized from raw_ohlcv days {first} .. {day} whose digest was "
            f"{recorded[:16] or '-'}; those days now digest to {current[:16] or '-'} (re-ingested since). "
            f"Re-materialize {kind} for {day}{' onwards' if more else ''} "
            f"(python -m kinematic_pipeline materialize --select {kind})"
        )


# corpus statistics: fitted on the token shards of a fold's training days


def fold_stats(settings: Settings, tok: Tokenization, scope: Fold) -> pl.DataFrame:
    """The corpus statistics of ``tok`` fitted on the training days of the fold ``scope``."""
    path, fix = settings.warehouse.corpus_stats_file(tok.name), rematerialize(tok.corpus_stats_asset)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: materialize {tok.corpus_stats_asset}")
    stats = exact.read_parquet(verify_recorded(path, fix))  # the bytes written, or refused naming the file
    if "fold" not in stats.columns or not (stats["fold"] == scope.label).any():
        raise ValueError(f"{path} holds no statistics of fold {scope.label}: {fix}")
    stats = stats.filter(pl.col("fold") == scope.label)
    # pinned: the statistics were fitted on the token shards the warehouse holds now (their manifests' hashes)
    wh, asset = settings.warehouse, tok.tokens_asset
    now = digest(wh.content_hashes(asset, wh.shard_days(asset, until=scope.train_end)))
    if stats["shards_digest"][0] != now:
        raise StalePairError(
            f"the {tok.name} corpus statistics of fold {scope.label} were fitted on other {asset} shards (digest "
            f"{stats['shards_digest'][0][:16]}, the warehouse's is {now[:16]}): {fix}"
        )
    return stats


# probes: fitted on a features file, for a fold's cut; their model file is the one the fit record hashes


def features_path(settings: Settings, variant: str, part: str = "training") -> Path:
    """The variant's features file: ``training`` (train and validation rows) or ``test``."""
    return settings.warehouse.features_file(lookup_variant(variant).tokenization.name, part)


def load_probe(settings: Settings, policy: Policy) -> tuple[ProbeModel, dict]:
    """The fitted probe of ``policy`` and its fit record, read as data once checked: the model file against the
    sha256 its fit record holds, the training features file against the one it was fitted on. Each failure is
    one ValueError naming the file and the asset to re-materialize (a ``StalePairError`` when the probe was fitted
    on other features or another cut)."""
    model_file, fit_file = settings.warehouse.probe_files(policy)
    fix = rematerialize(policy.variant.asset("probe"), policy.key)
    try:
        fit = json.loads(fit_file.read_text())
        expected = fit["model_sha256"], fit["model_file"], fit["learner"], fit["classes"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{fit_file} is not a probe's fit record ({type(exc).__name__}: {exc}): {fix}") from None
    data = model_file.read_bytes()
    if model_file.name != expected[1] or hashlib.sha256(data).hexdigest() != expected[0]:
        raise ValueError(
            f"{model_file} is not the file its fit record {fit_file.name} describes (sha256 differs: changed or "
            f"damaged since it was fitted): {fix}"
        )
    train_end = str(policy.fold.train_end)
    if fit.get("train_end") != train_end:
        raise StalePairError(
            f"the probe in {fit_file.parent} was fitted for the cut {fit.get('train_end')} (fold {fit.get('fold')}), "
            f"this run's is {train_end} (KP_TRAIN_END / KP_FOLDS): {fix}"
        )
    if fit["features_sha256"] != file_sha256(features_path(settings, policy.variant.name)):
        raise StalePairError(
            f"the probe of {policy} was fitted on another features file than "
            f"{features_path(settings, policy.variant.name)}: {fix}"
        )
    try:
        if fit["learner"] == "lr":
            model: ProbeModel = LinearProbeModel.from_bytes(data)
        else:
            model = TreeProbeModel.from_bytes(data, fit["classes"], settings.probe_threads)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same one line naming the file
        raise ValueError(f"{model_file} cannot be read as a probe ({type(exc).__name__}: {exc}): {fix}") from None
    return model, fit


# foundations warm-started over walk-forward folds: loaded only beside the parent they continued from


# the report group's products: pooled records and the verdict, computed from every policy's evaluation files

EVALUATION_INPUTS = (PREDICTIONS, MARGIN_BACKTESTS)  # what pooling and the verdict read (the universe files too)


def evaluation_digest(wh: Warehouse) -> str:
    """sha256 over the paths and bytes of every evaluation file pooling and the verdict read (each policy's
    predictions with its validation and universe files, and its margin backtests), in path order."""
    files = sorted(f for asset in EVALUATION_INPUTS for f in (wh.root / asset).rglob("*.parquet") if f.is_file())
    return digest([f"{f.relative_to(wh.root)}:{process_sha256(f)}" for f in files])


def pin_evaluation(wh: Warehouse, record: Path, inputs_digest: str, policies: str = "") -> None:
    """Record, beside a report-group product (``record``: its JSON), the evaluation files' digest it was computed
    from and the run's policies it was computed for (``run_keys.run_keys_digest``); written last."""
    pin = {"inputs_digest": inputs_digest, "policies": policies}
    write_bytes_atomic(record, json.dumps(pin).encode(), durable=wh.durable)


def check_evaluation(wh: Warehouse, record: Path, asset: str, policies: str | None = None) -> None:
    """``asset`` (whose pin is ``record``) was computed from the evaluation files on disk now (and, given
    ``policies``, for the run's policies: another KP_SEEDS, taus, variants or folds is another product);
    FileNotFoundError naming ``asset`` when it was never materialized, ``StalePairError`` when a policy's
    predictions or margin backtests were re-materialized since, or the run's grid changed."""
    folder = record.parent
    if not record.exists():
        raise FileNotFoundError(f"{folder} holds no {asset}: materialize {asset}")
    pin = json.loads(record.read_text())
    recorded, now = pin["inputs_digest"], evaluation_digest(wh)
    if recorded != now:
        raise StalePairError(
            f"{asset} in {folder} was computed from other predictions or margin backtests (digest {recorded[:16]}, "
            f"the warehouse's are {now[:16]}): {rematerialize(asset)}"
        )
    if policies is not None and pin.get("policies") != policies:
        raise StalePairError(
            f"{asset} in {folder} was computed for other policies than this run's (KP_SEEDS, the taus, variants or "
            f"folds changed since): {rematerialize(asset)}"
        )


# backtests: swept from one predictions file, whose sha256 their provenance records

BACKTEST_KEYS = ("variant", "seed", "tau", "fold")  # a policy in the evaluation views (fold: Fold.label)


def check_backtests_current(settings: Settings, frame: pl.DataFrame) -> None:
    """Each policy of ``frame`` (rows of a backtests view) was backtested from the predictions file on disk now: its
    provenance records the file's sha256 when it was swept; ``StalePairError`` naming the file and the partition to
    re-materialize otherwise (predictions re-materialized alone: the per-fold tables must not read old backtests)."""
    wh = settings.warehouse
    keys = frame.filter(pl.col("variant") != BENCHMARK).select(BACKTEST_KEYS).unique()
    if keys.is_empty():
        return
    pinned = wh.query("SELECT DISTINCT variant, seed, tau, fold, sha256 FROM provenance WHERE link = 'predictions'")
    pinned = keys.join(pinned, on=list(BACKTEST_KEYS), how="left", nulls_equal=True).sort(BACKTEST_KEYS)
    for row in pinned.iter_rows(named=True):
        policy = Policy.from_row(row, settings.folds, settings.tasks)
        path = wh.predictions_file(policy)
        now = process_sha256(path) if path.exists() else "missing"
        if row["sha256"] != now:
            raise StalePairError(
                f"the backtests of {policy} were swept from predictions sha256 {(row['sha256'] or '-')[:16]}; "
                f"{path} is now {now[:16]} (re-materialized since): re-materialize {policy.variant.name}_backtests "
                f"partition {policy.key}"
            )
