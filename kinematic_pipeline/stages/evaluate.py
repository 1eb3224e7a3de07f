"""predictions and backtests: one fine-tuned policy (variant x tau) over the test period, and its lineage.

Rolling protocol (paper "Experimental Setup & Protocol"): the action of day t comes from the token shard of
day t, whose window was fitted on bars up to t only, so nothing after t enters a decision. Test days are
the token shards dated after ``data.train_end``. No dagster here.
"""

from __future__ import annotations

import datetime as dt
import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.decisions import choose_margin, threshold_actions, unweighted_probabilities
from kinematic_pipeline.backtest.sweep import (
    EQUITY_SCHEMA,
    METRICS_SCHEMA,
    PREDICTIONS_SCHEMA,
    TRADES_SCHEMA,
    run_sweep,
)
from kinematic_pipeline.config import EvalConfig, Settings
from kinematic_pipeline.storage import (
    BACKTESTS,
    CORPUS_STATS,
    EQUITY_CURVES,
    LABELS,
    MARGIN_BACKTESTS,
    PREDICTIONS,
    PROVENANCE,
    RAW_OHLCV,
    SHARDS_USED_FILE,
    TRADES,
    Warehouse,
    file_sha256,
    policy_key,
    write_parquet_atomic,
)
from kinematic_pipeline.training.data import split_days
from kinematic_pipeline.training.run import load_classifier
from kinematic_pipeline.variants import BENCHMARK
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.window_store import training_shard_days
from kinematic_pipeline.windows import WindowNormalizer, tau_column

N_DEFAULT_TEST_TICKERS = 6  # the paper backtests six names

PROVENANCE_SCHEMA: dict[str, pl.DataType] = {  # every link holds for every ticker of the (variant, tau, seed)
    "variant": pl.String,
    "tau": pl.Float64,
    "seed": pl.Int64,
    "link": pl.String,  # backtests, predictions, adapter, foundation, training_shard, test_shard, raw_ohlcv, code
    "asset": pl.String,
    "date": pl.String,  # the shard's partition (trading day), when it has one
    "split": pl.String,  # training shards: train | val (pretrain) or finetune_train | finetune_val
    "path": pl.String,
    "sha256": pl.String,  # of the file's bytes at the time of the backtest (code rows: the version)
}


def partition_name(variant: str, tau_key: str, seed: int) -> str:
    """File stem of a (variant, tau, seed) partition's shards, e.g. ``splinegpt_tau0.01_seed1234``."""
    return f"{variant}_tau{tau_key}_seed{seed}"


def evaluation_days(settings: Settings, asset: str) -> list[dt.date]:
    """Dates of ``asset`` shards after the training cut (and not after ``data.end_date``)."""
    return Warehouse(settings.warehouse).shard_days(asset, after=settings.data.train_end, until=settings.data.end_date)


def evaluation_tickers(settings: Settings, asset: str, days: list[dt.date]) -> list[str]:
    """The configured test tickers, or the first six names with a test-period window."""
    if settings.evaluate.test_tickers is not None:
        return list(settings.evaluate.test_tickers)
    if not days:
        return []
    paths = [Warehouse(settings.warehouse).shard(asset, d) for d in days]
    names = pl.read_parquet(paths, columns=["ticker"])["ticker"].unique().sort()
    return names.head(N_DEFAULT_TEST_TICKERS).to_list()


def predict_probabilities(classifier, x: np.ndarray, batch_size: int) -> np.ndarray:
    """Softmax class probabilities [n, 3] (Buy, Sell, Hold) of normalized windows x [n, 64, C], in batches."""
    import torch

    out = np.empty((x.shape[0], 3), dtype=np.float32)
    classifier.eval()
    with torch.inference_mode():
        for start in range(0, x.shape[0], batch_size):
            logits = classifier(torch.from_numpy(np.ascontiguousarray(x[start : start + batch_size])))
            out[start : start + batch_size] = torch.softmax(logits.float(), dim=-1).numpy()
    return out


@dataclass(frozen=True)
class Predictions:
    frame: pl.DataFrame  # PREDICTIONS_SCHEMA, sorted by ticker, date
    shards: list[dict]  # every shard read: asset, date, path, content_hash
    missing_tickers: list[str]  # configured test tickers with no test-period window


def predict(
    settings: Settings,
    variant: str,
    tau: float,
    classifier,
    days: list[dt.date] | None = None,
    tickers: list[str] | None = None,
) -> Predictions:
    """Actions and probabilities of one fine-tuned classifier on every test day and ticker."""
    wh, spec = Warehouse(settings.warehouse), lookup_variant(variant)
    asset = spec.token_asset
    days = evaluation_days(settings, asset) if days is None else days
    tickers = evaluation_tickers(settings, asset, days) if tickers is None else tickers
    stats = pl.read_parquet(wh.shard(CORPUS_STATS, "stats")) if spec.normalized else None
    normalize = WindowNormalizer(spec, stats)
    label_col = tau_column(tau)
    frame = _test_windows(wh, asset, days, tickers, label_col)
    hashes = {a: wh.content_hashes(a, days) for a in (asset, RAW_OHLCV)}
    shards = [
        dict(asset=a, date=day, path=wh.shard(a, day), content_hash=hashes[a][i])
        for i, day in enumerate(days)
        for a in (asset, RAW_OHLCV)
    ]
    if frame["close"].is_null().any():
        bad = frame.filter(pl.col("close").is_null()).row(0, named=True)
        raise ValueError(f"{bad['ticker']} has a test window on {bad['date']} but no raw close that day")
    tokens = frame["tokens"].to_numpy() if frame.height else np.empty((0, 64, 9), np.float32)
    probs = predict_probabilities(classifier, normalize(tokens), settings.evaluate.predict_batch_size)
    out = (
        frame.select(
            pl.lit(variant).alias("variant"),
            pl.lit(tau).alias("tau"),
            pl.lit(settings.train.seed).alias("seed"),
            "ticker",
            "date",
            "close",
            pl.Series("p_buy", probs[:, 0]),
            pl.Series("p_sell", probs[:, 1]),
            pl.Series("p_hold", probs[:, 2]),
            pl.Series("action", probs.argmax(axis=1).astype(np.int8)),
            pl.col(label_col).fill_null(-1).alias("label"),
        )
        .cast(PREDICTIONS_SCHEMA)  # type: ignore[arg-type]
        .sort("ticker", "date")
    )
    present = set(out["ticker"].unique().to_list())
    return Predictions(out, shards, [t for t in tickers if t not in present])


def window_end_kinematics(tokens: np.ndarray) -> np.ndarray:
    """The kinematic state each causal window reports [n, 9]: its last token (index 63), as stored.

    Token 63 holds the Taylor coefficients (c0..c3 of log price, v0..v4 of log volume) at the window's last
    interior knot, fitted on bars up to the window's end only. It is not carried to the end knot itself:
    the natural end condition makes the acceleration there 0 by construction, which would hide c2.
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    if tokens.ndim != 3 or tokens.shape[1:] != (64, 9):
        raise ValueError(f"tokens must have shape [n, 64, 9], got {tokens.shape}")
    return tokens[:, 63, :].copy()


@functools.lru_cache(maxsize=1)
def code_revision() -> str:
    """The git commit of the package's checkout (plus "+dirty" for local changes), or "unknown"."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance_frame(
    variant: str,
    tau: float,
    seed: int,
    *,
    outputs: dict[str, Path],
    adapter_files: list[Path],
    foundation: Path,
    training_shards: dict[str, Path],
    test_shards: list[dict],
    code_versions: dict[str, str],
) -> pl.DataFrame:
    """The lineage of one (variant, tau) backtest, one row per file (or code version) it depends on.

    ``outputs``: asset -> file written by this run (backtests, predictions, ...); ``training_shards``:
    split prefix -> the ``shards_used.parquet`` of the foundation ("pretrain") and the adapter ("finetune").
    """
    rows: list[dict] = []

    def add(link: str, asset: str, path: Path, sha: str | None = None, **extra) -> None:
        rows.append(dict(link=link, asset=asset, path=str(path), sha256=sha or file_sha256(Path(path)), **extra))

    for asset, path in outputs.items():
        add(asset, asset, path)
    for path in adapter_files:
        add("adapter", f"{variant}_adapter", path)
    add("foundation", f"{variant}_foundation", foundation)
    for prefix, used_file in training_shards.items():
        add(f"{prefix}_lineage", f"{variant}_{'foundation' if prefix == 'pretrain' else 'adapter'}", used_file)
        used = pl.read_parquet(used_file)
        for row in used.filter(pl.col("served") > 0).iter_rows(named=True):  # what the model was served
            link = "window_store" if row["split"] == "store" else "training_shard"
            date = None if link == "window_store" else row["date"]
            add(link, row["asset"], row["path"], row["content_hash"], date=date, split=f"{prefix}_{row['split']}")
    for shard in test_shards:
        link = "raw_ohlcv" if shard["asset"] == "raw_ohlcv" else "test_shard"
        add(link, shard["asset"], shard["path"], shard["content_hash"], date=str(shard["date"]))
    for name, version in code_versions.items():
        rows.append(dict(link="code", asset=name, path="", sha256=version))
    keys = ("variant", "tau", "seed")
    frame = pl.DataFrame(rows, schema={k: v for k, v in PROVENANCE_SCHEMA.items() if k not in keys})
    frame = frame.with_columns(pl.lit(variant).alias("variant"), pl.lit(tau).alias("tau"), pl.lit(seed).alias("seed"))
    return frame.select(list(PROVENANCE_SCHEMA)).cast(PROVENANCE_SCHEMA)  # type: ignore[arg-type]


def write_partition(settings: Settings, asset: str, name: str, frame: pl.DataFrame) -> Path:
    path = Warehouse(settings.warehouse).shard(asset, name)
    write_parquet_atomic(frame, path)
    return path


MARGIN_METRICS_SCHEMA = {**METRICS_SCHEMA, "margin": pl.Float64, "validation_rows": pl.Int64}
EVALUATION_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    PREDICTIONS: PREDICTIONS_SCHEMA,
    BACKTESTS: METRICS_SCHEMA,
    MARGIN_BACKTESTS: MARGIN_METRICS_SCHEMA,
    EQUITY_CURVES: EQUITY_SCHEMA,
    TRADES: TRADES_SCHEMA,
    PROVENANCE: PROVENANCE_SCHEMA,
}


def refresh_evaluation_views(settings: Settings, assets: tuple[str, ...]) -> None:
    """(Re)create the catalog views of the evaluation shards a run just wrote."""
    wh = Warehouse(settings.warehouse)
    for asset in assets:
        wh.refresh_view(asset, EVALUATION_SCHEMAS[asset])


def _shards_frame(shards: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(
        [{**s, "date": str(s["date"]), "path": str(s["path"])} for s in shards],
        schema={"asset": pl.String, "date": pl.String, "path": pl.String, "content_hash": pl.String},
    )


def _test_windows(wh: Warehouse, asset: str, days: list[dt.date], tickers: list[str], label_col: str) -> pl.DataFrame:
    """The ``tickers``' windows of ``days`` with the day's close and label (null where none yet): one scan per
    asset over the days' files, not one read per day (a day's token shard holds every ticker's window)."""
    if not days:  # no test day: an empty frame (tokens are then not read)
        return pl.DataFrame(schema={"ticker": pl.String, "date": pl.Date, "close": pl.Float64, label_col: pl.Int8})
    wanted = pl.col("ticker").is_in(tickers)
    windows = pl.scan_parquet([wh.shard(asset, d) for d in days]).select("ticker", "date", "tokens").filter(wanted)
    # a raw_ohlcv day's bars: its partition is the folder's date (join on the file, not on the bar's date)
    day_of = pl.LazyFrame({"_file": [str(wh.shard(RAW_OHLCV, d)) for d in days], "date": days})
    closes = (
        pl.scan_parquet([wh.shard(RAW_OHLCV, d) for d in days], include_file_paths="_file")
        .filter(wanted)
        .select("ticker", "close", "_file")
        .join(day_of, on="_file")
        .drop("_file")
    )
    frame = windows.join(closes, on=["ticker", "date"], how="left")
    label_files = [p for p in (wh.shard(LABELS, d) for d in days) if p.exists()]
    if label_files:
        labels = pl.scan_parquet(label_files).filter(wanted).select("ticker", "date", label_col)
        frame = frame.join(labels, on=["ticker", "date"], how="left")
    else:
        frame = frame.with_columns(pl.lit(None, pl.Int8).alias(label_col))
    return frame.collect()


def run_predictions(settings: Settings, variant: str, tau_key: str) -> tuple[Predictions, Path]:
    """Load the (variant, tau) policy, predict the test period, write the partition's shard and its inputs."""
    seed = settings.train.seed
    foundation, adapter = Warehouse(settings.warehouse).policy_files(variant, tau_key, seed)
    asset = lookup_variant(variant).token_asset
    if not evaluation_days(settings, asset):
        raise ValueError(
            f"no {asset} shard is dated after the training cut {settings.data.train_end}: the test period is "
            f"empty (the paper tests 2023-01-01 onward; load bars after the cut, e.g. KP_SOURCE_PATH with newer data)"
        )
    classifier = load_classifier(settings, variant, foundation, adapter)
    result = predict(settings, variant, float(tau_key), classifier)
    if result.frame.height == 0:
        raise ValueError(
            f"none of the test tickers {result.missing_tickers} has a {asset} window after {settings.data.train_end}"
        )
    name = partition_name(variant, tau_key, seed)
    path = write_partition(settings, PREDICTIONS, name, result.frame)
    # The same policy on the validation days of the training period (the fine-tuning's own split), for the
    # test tickers: what the second decision rule's margin is chosen on (never on test days).
    tickers = sorted(result.frame["ticker"].unique().to_list())
    validation = predict(settings, variant, float(tau_key), classifier, validation_days(settings, asset), tickers)
    write_parquet_atomic(validation.frame, predictions_subfolder(settings, "validation", name))
    # the shards read, for the backtest's provenance (subfolders: not part of the predictions view)
    write_parquet_atomic(_shards_frame(result.shards), predictions_subfolder(settings, "inputs", name))
    refresh_evaluation_views(settings, (PREDICTIONS,))
    return result, path


def validation_days(settings: Settings, asset: str) -> list[dt.date]:
    """The validation days of training: the last ``val_fraction`` of the days on or before the cut that hold
    windows (the days of the window store, listed from the manifests)."""
    return split_days(training_shard_days(settings, asset)[0], settings.train.val_fraction)[1]


def margin_rule_backtests(settings: Settings, predictions: pl.DataFrame, name: str) -> pl.DataFrame:
    """The second decision rule, backtested like the paper's: undo the class weighting (p = q / w) and Buy /
    Sell when p_buy - p_sell exceeds +m / falls below -m, m chosen on the validation-day predictions only
    (``decisions.choose_margin``: balanced accuracy over a fixed grid). Metrics rows with ``m`` beside."""
    ev, weights = settings.evaluate, settings.train.class_weights
    validation = pl.read_parquet(predictions_subfolder(settings, "validation", name))
    labelled = validation.filter(pl.col("label") >= 0)
    probs = [pl.col(c) for c in ("p_buy", "p_sell", "p_hold")]
    margin = 0.0
    if labelled.height:
        p_val = unweighted_probabilities(labelled.select(probs).to_numpy().astype(np.float64), weights)
        margin = choose_margin(p_val, labelled["label"].to_numpy())
    p_test = unweighted_probabilities(predictions.select(probs).to_numpy().astype(np.float64), weights)
    actions = pl.Series("action", threshold_actions(p_test, margin), dtype=pl.Int8)
    sweep = sweep_costs(ev, predictions.with_columns(actions), benchmark=False, class_weights=weights)
    return sweep.metrics.with_columns(
        pl.lit(margin).alias("margin"), pl.lit(labelled.height).cast(pl.Int64).alias("validation_rows")
    )


def sweep_costs(ev: EvalConfig, predictions: pl.DataFrame, benchmark: bool = True, class_weights=None):
    """``run_sweep`` of ``predictions`` with the run's evaluation settings (costs, tax, bootstrap, rf);
    ``class_weights``: those the probabilities were trained with (``train.class_weights``), so that the Brier
    and ECE columns score the de-weighted probabilities (None: the probabilities as stored)."""
    return run_sweep(
        predictions,
        ev.costs_bps,
        initial_cash=ev.initial_cash,
        tax_rate=ev.tax_rate,
        tax_year_days=ev.tax_year_days,
        n_boot=ev.bootstrap_resamples,
        block_days=ev.bootstrap_block_days,
        boot_seed=ev.bootstrap_seed,
        rf_annual=ev.rf_annual,
        benchmark=benchmark,
        class_weights=class_weights,
    )


def predictions_subfolder(settings: Settings, folder: str, name: str) -> Path:
    """``predictions/<folder>/<name>.parquet``: the validation-day predictions and the shards read."""
    return Warehouse(settings.warehouse).root / PREDICTIONS / folder / f"{name}.parquet"


def run_backtests(settings: Settings, variant: str, tau_key: str, code_versions: dict[str, str]):
    """Sweep the stored predictions over every cost, write metrics/equity/trades and the provenance.

    Buy & Hold depends only on the test tickers' closes, not on the policy: its rows go to one shard per
    asset (``buy_and_hold.parquet``) that every partition writes with the same bytes, so each view holds
    them once.
    """
    ev, wh, seed = settings.evaluate, Warehouse(settings.warehouse), settings.train.seed
    name = partition_name(variant, tau_key, seed)
    predictions_file = wh.shard(PREDICTIONS, name)
    inputs_file = predictions_subfolder(settings, "inputs", name)
    if not predictions_file.exists():
        raise FileNotFoundError(
            f"{predictions_file} is missing: materialize predictions partition {policy_key(variant, seed)}|{tau_key}"
        )
    sweep = sweep_costs(ev, pl.read_parquet(predictions_file), class_weights=settings.train.class_weights)
    paths = {}
    for asset, frame in ((BACKTESTS, sweep.metrics), (EQUITY_CURVES, sweep.equity), (TRADES, sweep.trades)):
        is_benchmark = pl.col("variant") == BENCHMARK
        write_partition(settings, asset, BENCHMARK, frame.filter(is_benchmark))
        paths[asset] = write_partition(settings, asset, name, frame.filter(~is_benchmark))
    margin_metrics = margin_rule_backtests(settings, pl.read_parquet(predictions_file), name)
    paths[MARGIN_BACKTESTS] = write_partition(settings, MARGIN_BACKTESTS, name, margin_metrics)
    foundation, adapter = wh.policy_files(variant, tau_key, seed)
    inputs = pl.read_parquet(inputs_file)
    provenance = provenance_frame(
        variant,
        float(tau_key),
        seed,
        outputs={
            **paths,
            PREDICTIONS: predictions_file,
            f"{PREDICTIONS}_validation": predictions_subfolder(settings, "validation", name),
            f"{PREDICTIONS}_inputs": inputs_file,
        },
        adapter_files=wh.adapter_files(variant, tau_key, seed),
        foundation=foundation,
        training_shards={
            "pretrain": foundation.parent / SHARDS_USED_FILE,
            "finetune": adapter / SHARDS_USED_FILE,
        },
        test_shards=inputs.to_dicts(),
        code_versions=code_versions,
    )
    paths[PROVENANCE] = write_partition(settings, PROVENANCE, name, provenance)
    refresh_evaluation_views(settings, tuple(paths))
    return sweep, paths
