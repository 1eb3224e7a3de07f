"""Training data: uniform samples of the training period's windows, served from the window store.

Training runs a budget of optimizer steps (``training/run.py``); each epoch within it is a uniform sample
(without replacement) of the training windows: every day and every ticker
equally likely, a different sample per epoch and seed, the same one for the same seed and epoch
(``window_store.epoch_sample``); without a cap, every window once, shuffled. The windows come from the token
asset's window store (``kinematic_pipeline.window_store``: one memory-mapped file built from the day shards
on or before the last fold's training end), so a sample spread over thousands of days reads only its own
rows; a policy's fold (``folds.py``) reads the store's days up to its own training end, and the labels of
the days whose horizon reaches its test period are purged. The fold's training days split by date: the last
``val_fraction`` of them validate (a capped sample fixed per fold, the same windows for every seed and epoch, so that
validation losses compare across epochs and seeds). DDP ranks
and DataLoader workers serve disjoint, equal parts of each epoch's sample. The DataLoader runs with ``batch_size=None``:
the stream yields whole batches.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import polars as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import split_days
from kinematic_pipeline.model_pins import warehouse_path
from kinematic_pipeline.pins import fold_stats, verified_labels
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.sampling import epoch_sample, part_of
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.layout import LABELS, SHARDS_USED_SCHEMA
from kinematic_pipeline.warehouse.no_follow import append_text
from kinematic_pipeline.window_store import WindowStore, open_store


def _part() -> tuple[int, int, int]:
    """(rank, part, parts): this process's DDP rank and its share among ranks x DataLoader workers."""
    rank, world = 0, 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    info = get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank, rank * workers + worker, world * workers


class SampledWindows(IterableDataset):
    """Batches of windows drawn from ``rows`` of a store: ``x`` (float32 [B, 64, C]) or ``(x, y)`` when ``labels``
    (aligned with ``rows``) are given (y [B]: int64 class codes, or a task's float32 values: ``Task.stored``).

    ``split`` "train" draws a new sample each epoch; "val" serves one sample (epoch 0's: a capped one is the same
    windows for every seed) every epoch.
    """

    def __init__(
        self,
        store: WindowStore,
        rows: np.ndarray,
        normalize: Callable[[np.ndarray], np.ndarray],  # Tokenization.normalizer
        batch_size: int,
        *,
        cap: int | None,
        seed: int,
        split: str,
        labels: np.ndarray | None = None,
        trace_dir: str | None = None,
    ) -> None:
        super().__init__()
        if labels is not None and len(labels) != len(rows):
            raise ValueError(f"{len(labels)} labels for {len(rows)} rows")
        self.store, self.rows, self.normalize, self.batch_size = (
            store,
            np.asarray(rows, np.int64),
            normalize,
            batch_size,
        )
        self.cap, self.seed, self.split, self.labels, self.epoch = cap, seed, split, labels, 0
        self.trace_dir = trace_dir

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def positions(self, epoch: int | None = None) -> np.ndarray:
        """Positions into ``rows`` of an epoch's whole sample (every part), in serving order."""
        epoch = self.epoch if epoch is None else epoch
        return epoch_sample(len(self.rows), self.cap, self.seed, epoch if self.split == "train" else 0, self.split)

    def windows_per_epoch(self, parts: int = 1) -> int:
        k = len(self.rows) if self.cap is None else min(self.cap, len(self.rows))
        return k // parts * parts

    def served_rows(self, epoch: int, parts: int = 1, batches: int | None = None) -> np.ndarray:
        """The store rows every part together serves in ``epoch`` (for lineage: what the model saw), or in its
        first ``batches`` batches per part (a run that ended inside the epoch)."""
        sample = self.positions(epoch)
        limit = None if batches is None else batches * self.batch_size
        return self.rows[np.concatenate([part_of(sample, p, parts)[:limit] for p in range(parts)])]

    def __iter__(self):
        rank, part, parts = _part()
        mine = part_of(self.positions(), part, parts)
        day_of_row = self.store.day_of_row
        served = np.zeros(self.store.days.height, dtype=np.int64)
        try:
            for start in range(0, len(mine), self.batch_size):
                pos = mine[start : start + self.batch_size]
                rows = self.rows[pos]
                x = self.normalize(self.store.read(rows))
                y = None if self.labels is None else self.labels[pos]
                finite = np.isfinite(x).all(axis=(1, 2))
                if not finite.all():  # a corrupt window never reaches the optimizer (the store marks them)
                    x, rows, y = x[finite], rows[finite], None if y is None else y[finite]
                served += np.bincount(day_of_row[rows], minlength=served.size)
                xt = torch.from_numpy(np.ascontiguousarray(x))
                yield xt if y is None else (xt, torch.from_numpy(_batch_target(y)))
        finally:
            if self.trace_dir:
                _trace(self, Path(self.trace_dir), rank, served)


def _trace(stream: SampledWindows, folder: Path, rank: int, served: np.ndarray) -> None:
    """KP_TRAIN_SHARD_TRACE=<dir> (``train.shard_trace``): each rank appends what it served, one line per
    (epoch, split, rank, day): ``epoch<TAB>split<TAB>rank<TAB>day<TAB>windows`` to <dir>/rank<r>.tsv (a
    DataLoader worker w > 0 to rank<r>.worker<w>.tsv)."""
    info = get_worker_info()
    name = f"rank{rank}.tsv" if info is None or info.id == 0 else f"rank{rank}.worker{info.id}.tsv"
    days = stream.store.days["date"].to_list()
    Path(folder).mkdir(parents=True, exist_ok=True)
    lines = (
        f"{stream.epoch}\t{stream.split}\t{rank}\t{days[d].isoformat()}\t{n}\n"
        for d in np.flatnonzero(served)
        for n in [served[d]]
    )
    append_text(Path(folder) / name, "".join(lines))  # appended, never through a link (``no_follow``)


class EpochSeed(L.Callback):
    """Gives the training stream its epoch before each epoch's iterator starts (shuffle = f(seed, epoch))."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = trainer.datamodule
        if datamodule is not None and hasattr(datamodule, "set_epoch"):
            datamodule.set_epoch(trainer.current_epoch)


def _batch_target(y: np.ndarray) -> np.ndarray:
    """A batch's targets: float32 values as they are, class codes as int64."""
    return np.ascontiguousarray(y, dtype=np.float32 if np.asarray(y).dtype.kind == "f" else np.int64)


def store_labels(
    settings: Settings, store: WindowStore, task: Task, until: dt.date | None = None
) -> tuple[np.ndarray, dict[dt.date, str]]:
    """``task``'s target (its ``label_column``, as ``Task.stored``) for every store row (``Task.unknown`` where unknown),
    from the labels shards of the store's days
    (on or before ``until``: a fold's ``label_end``, the purge) joined on (date, ticker), and those shards' content
    hashes. Only days on or before the cut are read (the store holds no other day), and with ``until`` no label
    whose next session lies after it: its pin check would open that session's manifests."""
    wh, col = settings.warehouse, task.label_column
    days = [
        d for d in store.days["date"].to_list() if (until is None or d <= until) and wh.manifest(LABELS, d).exists()
    ]
    hashes = dict(zip(days, wh.content_hashes(LABELS, days)))
    keys = store.rows.select("date", "ticker")
    if not days:
        return task.stored(np.full(keys.height, task.unknown)), hashes
    labels = exact.scan_parquet(verified_labels(settings, days)).select("date", "ticker", col).collect()
    joined = keys.join(labels, on=["date", "ticker"], how="left", maintain_order="left")
    return task.stored(joined[col].fill_null(task.unknown).to_numpy()), hashes


def distinct_sample(rows: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` of ``rows`` drawn without replacement, seeded by ``seed`` and ``n`` (in store order; every row when
    there are no more than ``n``): the fixed set of distinct windows a fine-tuning's epochs draw from."""
    if len(rows) <= n:
        return rows
    rng = np.random.default_rng([seed, n])
    return np.sort(rng.choice(rows, size=n, replace=False))


class WindowDataModule(L.LightningDataModule):
    """Train/validation windows of one policy's token asset (and the variant's input channels) in the training
    period, drawn from its window store; with the labels of the policy's tau when it has one (fine-tuning:
    rows with an unknown label are never drawn), seeded by the policy's seed."""

    def __init__(self, settings: Settings, policy: Policy | Foundation, *, num_workers: int = 0) -> None:
        super().__init__()
        self.task = policy.task  # the labels it serves (a foundation's: none)
        if self.task is not None and self.task.label_column not in {t.label_column for t in settings.tasks}:
            raise ValueError(
                f"task {self.task.key} is not one of the run's tasks ({', '.join(t.key for t in settings.tasks)}): "
                "its labels are not materialized"
            )
        self.settings, self.policy, self.variant = settings, policy, policy.variant
        self.token_asset = self.variant.token_asset
        self.num_workers = num_workers
        self.train_days: list[dt.date] = []
        self.val_days: list[dt.date] = []
        self.store: WindowStore | None = None
        self._labels: np.ndarray | None = None  # per store row, the task's target (Task.unknown: unknown)
        self._label_hashes: dict[dt.date, str] = {}
        self._train: SampledWindows | None = None
        self._val: SampledWindows | None = None

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        cfg = self.settings.train
        store = self.store = open_store(self.settings, self.variant.tokenization)
        fold = self.fold = self.policy.fold
        days = [d for d in store.days["date"].to_list() if d <= fold.train_end]  # the fold's prefix of the store
        self.train_days, self.val_days = split_days(days, cfg.val_fraction)
        day_of_row = store.day_of_row
        usable = store.rows["finite"].to_numpy() & (day_of_row < len(days))
        if self.task is not None:
            self._labels, self._label_hashes = store_labels(self.settings, store, self.task, until=fold.label_end)
            purged = store.rows["date"].to_numpy() > np.datetime64(fold.label_end, "D")  # label reaches the test
            self._labels[purged] = self.task.unknown  # (not read: unknown already)
            usable = usable & self.task.known(self._labels)
        is_val = day_of_row >= len(self.train_days)
        stats = None
        if self.variant.normalized:
            stats = fold_stats(self.settings, self.variant.tokenization, self.policy.fold)
        common = dict(
            store=store,
            normalize=self.variant.tokenization.normalizer(stats, self.variant.channels),
            batch_size=cfg.batch_size,
            cap=self.window_cap(),
            seed=self.policy.seed,
            trace_dir=cfg.shard_trace,
        )
        for split, mask in (("train", usable & ~is_val), ("val", usable & is_val)):
            rows = np.flatnonzero(mask)
            if split == "train" and self.task is not None and cfg.finetune_windows is not None:
                rows = distinct_sample(rows, cfg.finetune_windows, self.policy.seed)
            labels = None if self._labels is None else self._labels[rows]
            cap = common["cap"] if split == "train" else cfg.max_val_windows
            stream = SampledWindows(rows=rows, split=split, labels=labels, **{**common, "cap": cap})
            setattr(self, f"_{split}", stream)

    @property
    def has_validation(self) -> bool:
        self.setup()
        return len(self._val.rows) > 0

    def set_epoch(self, epoch: int) -> None:
        for stream in (self._train, self._val):
            if stream is not None:
                stream.set_epoch(epoch)

    def _loader(self, stream: SampledWindows) -> DataLoader:
        # batch_size=None: the stream yields whole batches; workers serve disjoint parts of the sample
        return DataLoader(stream, batch_size=None, num_workers=self.num_workers, persistent_workers=False)

    def train_dataloader(self) -> DataLoader:
        self.setup()
        return self._loader(self._train)

    def val_dataloader(self) -> DataLoader:
        self.setup()
        return self._loader(self._val)

    def train_windows(self, parts: int = 1) -> int:
        """Windows per training epoch, over every rank (``parts`` of them): the cap, or every usable window."""
        self.setup()
        return self._train.windows_per_epoch(parts)

    def window_cap(self) -> int | None:
        """Windows per epoch at most: the fine-tuning cap for labelled streams when one is set."""
        cfg = self.settings.train
        if self.task is not None and cfg.finetune_max_windows_per_epoch is not None:
            return cfg.finetune_max_windows_per_epoch
        return cfg.max_windows_per_epoch

    def steps_per_epoch(self, parts: int = 1) -> int:
        """Optimizer steps per epoch on each of ``parts`` ranks."""
        return max(1, math.ceil(self.train_windows(parts) / parts / self.settings.train.batch_size))

    def target_summary(self) -> dict:
        """The task's summary (``Task.summary``: Buy/Sell/Hold's class counts) of the known targets over every window
        of the training split."""
        self.setup()
        if self.task is None:
            raise ValueError(f"target_summary needs labels: {self.policy} is a foundation, it has no task")
        return self.task.summary(self._train.labels)

    def shards_used(self, steps: int, evaluations: int, parts: int = 1) -> list[dict]:
        """Lineage: the store itself and every day shard of the training period, with its split and the windows
        of it served by ``steps`` optimizer steps per rank (whole epochs, then the first batches of the next) and
        ``evaluations`` validations (the one validation sample each time; 0: in the store, never drawn), and the
        labels shards when fine-tuning. Each path relative to the warehouse root (``model_pins.warehouse_path``): a
        copied or moved warehouse traces its own files."""
        self.setup()
        store, wh = self.store, self.settings.warehouse
        day_of_row = store.day_of_row
        served = np.zeros(store.days.height, dtype=np.int64)
        per_epoch = self.steps_per_epoch(parts)
        epochs, rest = divmod(steps, per_epoch)
        for epoch in range(epochs + (rest > 0)):
            batches = rest if epoch == epochs else None
            served += np.bincount(day_of_row[self._train.served_rows(epoch, parts, batches)], minlength=served.size)
        if evaluations:
            served += evaluations * np.bincount(day_of_row[self._val.served_rows(0, parts)], minlength=served.size)
        rows = [
            dict(
                asset=self.variant.tokenization.window_store_asset,
                split="store",
                date=store.manifest["last_day"].isoformat(),
                path=warehouse_path(wh, store.path),
                content_hash=store.manifest["tokens_sha256"],
                windows=store.manifest["windows"],
                served=int(served.sum()),
            )
        ]
        n_train, n_fold = len(self.train_days), len(self.train_days) + len(self.val_days)
        for k, day in enumerate(store.days.head(n_fold).iter_rows(named=True)):  # the fold's days only
            split = "train" if k < n_train else "val"
            row = dict(
                split=split,
                date=day["date"].isoformat(),
                path=warehouse_path(wh, wh.root / day["path"]),
                content_hash=day["content_hash"],
                windows=day["windows"],
                served=int(served[k]),
            )
            rows.append({"asset": self.token_asset, **row})
            if self.task is not None and day["date"] in self._label_hashes:
                label = dict(
                    path=warehouse_path(wh, wh.shard(LABELS, day["date"])), content_hash=self._label_hashes[day["date"]]
                )
                rows.append({"asset": LABELS, **row, **label})
        return rows


def write_shards_used(settings: Settings, out_dir: Path, shards: list[dict]) -> Path:
    """Record what a training run was served (``WindowDataModule.shards_used``) next to its output."""
    path = settings.warehouse.shards_used(out_dir)
    settings.warehouse.write(pl.DataFrame(shards, schema=SHARDS_USED_SCHEMA), path)
    return path
