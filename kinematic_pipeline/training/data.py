"""Training data: token shards streamed from Parquet in bounded memory, split by date.

The paper's corpus is ~52 GB, so nothing here loads it whole: a ``WindowStream`` reads a few day shards
at a time, normalizes them, shuffles inside a bounded buffer and yields whole batches (the DataLoader
runs with ``batch_size=None``: collating single windows would cost more than reading them). Only shards
dated on or before ``data.train_end`` are ever opened; the last ``val_fraction`` of those days validate.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import polars as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from kinematic_pipeline.config import Settings
from kinematic_pipeline.storage import CORPUS_STATS, LABELS, Warehouse
from kinematic_pipeline.variants import ACTION_KEYS
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.windows import WindowNormalizer, tau_column

SHARDS_PER_READ = 4  # day shards read per Parquet call (a paper-scale day is ~500 windows, ~1.2 MB)


@dataclass(frozen=True)
class Shard:
    """One trading day's token shard (and its label shard when fine-tuning)."""

    day: dt.date
    path: str
    content_hash: str
    windows: int
    label_path: str | None = None
    label_hash: str | None = None


def split_days(days: list[dt.date], val_fraction: float) -> tuple[list[dt.date], list[dt.date]]:
    """Split sorted training-period days by date: the last ``val_fraction`` of them validate."""
    days = sorted(days)
    n_val = math.ceil(len(days) * val_fraction) if val_fraction > 0 else 0
    n_val = max(0, min(n_val, len(days) - 1))  # at least one training day
    return days[: len(days) - n_val], days[len(days) - n_val :]


def list_shards(settings: Settings, asset: str, with_labels: bool = False) -> list[Shard]:
    """Non-empty shards of ``asset`` in the training period (file names and manifests only)."""
    wh = Warehouse(settings.warehouse)
    days = wh.shard_days(asset, until=settings.data.train_end)
    metas = wh.manifest_rows(asset, days, ["windows", "content_hash"])
    # with labels: the newest session has none yet (its labels need the next day's bar; nightly ticks)
    label_days = [d for d in days if wh.manifest(LABELS, d).exists()] if with_labels else []
    label_hashes = dict(zip(label_days, wh.content_hashes(LABELS, label_days)))
    shards = []
    for day, meta in zip(days, metas):
        if meta["windows"] == 0:
            continue  # days before a ticker has 64 sessions of history
        if with_labels and day not in label_hashes:
            continue
        label_path = str(wh.shard(LABELS, day)) if with_labels else None
        shards.append(
            Shard(day, str(wh.shard(asset, day)), meta["content_hash"], meta["windows"], label_path, label_hashes.get(day))
        )
    return shards


class WindowStream(IterableDataset):
    """Batches of windows streamed from day shards; shuffled in a bounded buffer, deterministic per epoch.

    Yields ``x`` (float32 [B, 64, C]) or ``(x, y)`` (y int64 [B], labels 0/1/2) when ``tau`` is given.
    Shards are split among DataLoader workers (and distributed ranks) after the epoch's shard shuffle.
    """

    def __init__(
        self,
        shards: list[Shard],
        normalize: WindowNormalizer,
        batch_size: int,
        *,
        shuffle: bool,
        buffer_windows: int,
        seed: int,
        max_windows: int | None = None,
        tau: float | None = None,
    ) -> None:
        super().__init__()
        if tau is not None and any(s.label_path is None for s in shards):
            raise ValueError("labels requested but the shards carry no label paths")
        self.shards, self.normalize, self.batch_size = shards, normalize, batch_size
        self.shuffle, self.buffer_windows, self.seed = shuffle, max(buffer_windows, batch_size), seed
        self.max_windows, self.tau, self.epoch = max_windows, tau, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _partition(self) -> tuple[list[Shard], int | None, np.random.Generator]:
        """This worker's shards, its share of the window cap, and its generator (seed, epoch, worker)."""
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        part, parts = rank * workers + worker, world * workers
        order = np.arange(len(self.shards))
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.shards))
        mine = [self.shards[k] for k in order[part::parts]]
        cap = None if self.max_windows is None else self.max_windows // parts + (part < self.max_windows % parts)
        return mine, cap, np.random.default_rng([self.seed, self.epoch, part])

    def _batches_per_part(self) -> int | None:
        """Under DDP, the batches every rank yields: the fewest any part has (from the manifests' window
        counts). Every rank must run the same number of steps, or the one with more waits forever in its
        gradient all-reduce. One process (world 1): None, no limit. Label filtering is not counted here."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return None
        world = torch.distributed.get_world_size()
        info = get_worker_info()
        workers = info.num_workers if info is not None else 1
        parts = world * workers
        if parts == 1:
            return None
        order = np.arange(len(self.shards))
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.shards))
        fewest = None
        for part in range(parts):
            windows = sum(self.shards[k].windows for k in order[part::parts])
            if self.max_windows is not None:
                windows = min(windows, self.max_windows // parts + (part < self.max_windows % parts))
            batches = math.ceil(windows / self.batch_size)
            fewest = batches if fewest is None else min(fewest, batches)
        return fewest

    def _read(self, group: list[Shard]) -> tuple[np.ndarray, np.ndarray | None]:
        frame = pl.read_parquet([s.path for s in group], columns=["ticker", "date", "tokens"])
        labels = None
        if self.tau is not None:
            col = tau_column(self.tau)
            frame = frame.join(
                pl.read_parquet([s.label_path for s in group], columns=["ticker", "date", col]),
                on=["ticker", "date"],
                how="inner",
                maintain_order="left",  # the shuffle is a function of (seed, epoch) only
            ).filter(pl.col(col).is_not_null() & (pl.col(col) >= 0))
            labels = frame[col].to_numpy().astype(np.int64)
        tokens = frame["tokens"].to_numpy() if frame.height else np.empty((0, 64, 9), np.float32)
        x = self.normalize(tokens)
        finite = np.isfinite(x).all(axis=(1, 2))
        if not finite.all():  # a corrupt window never reaches the optimizer
            x, labels = x[finite], None if labels is None else labels[finite]
        return x, labels

    def _chunks(self, shards: list[Shard]) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        for k in range(0, len(shards), SHARDS_PER_READ):
            yield self._read(shards[k : k + SHARDS_PER_READ])

    def __iter__(self):
        shards, cap, rng = self._partition()
        _trace(self, shards)
        remaining = math.inf if cap is None else cap
        batches_left = self._batches_per_part()
        for x, y in _buffered(self._chunks(shards), self.buffer_windows, self.batch_size, rng, self.shuffle):
            if remaining <= 0 or batches_left == 0:
                return
            if batches_left is not None:
                batches_left -= 1
            if len(x) > remaining:
                x, y = x[: int(remaining)], None if y is None else y[: int(remaining)]
            remaining -= len(x)
            xt = torch.from_numpy(x)
            yield xt if y is None else (xt, torch.from_numpy(y))


def _trace(stream: WindowStream, shards: list[Shard]) -> None:
    """KP_TRAIN_SHARD_TRACE=<dir>: each rank appends the shards it streams (epoch, split, rank, path) to
    <dir>/rank<r>.tsv, to see how an epoch's shards were dealt (test_ddp_cpu.py); unset: nothing."""
    folder = os.environ.get("KP_TRAIN_SHARD_TRACE")
    if not folder:
        return
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    info = get_worker_info()
    worker = info.id if info is not None else 0
    split = "train" if stream.shuffle else "val"
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"rank{rank}.tsv", "a") as out:
        out.writelines(f"{stream.epoch}\t{split}\t{rank}\t{worker}\t{s.path}\n" for s in shards)


def _buffered(chunks, capacity: int, batch_size: int, rng: np.random.Generator, shuffle: bool):
    """Batches from a stream of (x, y) chunks, shuffled inside a buffer of at most ``capacity`` windows
    (plus one chunk). When full, the buffer is permuted and all but half of it is emitted: each window
    is copied about twice, and the buffer never grows with the corpus."""
    xs, ys, n = [], [], 0
    for x, y in chunks:
        xs.append(x)
        ys.append(y)
        n += len(x)
        if n < capacity and shuffle or n < batch_size:
            continue
        x_all, y_all = _merge(xs, ys, rng if shuffle else None)
        emit = (n - (capacity // 2 if shuffle else 0)) // batch_size * batch_size
        for k in range(0, emit, batch_size):
            yield x_all[k : k + batch_size], None if y_all is None else y_all[k : k + batch_size]
        xs, ys, n = [x_all[emit:]], [None if y_all is None else y_all[emit:]], n - emit
    if n:
        x_all, y_all = _merge(xs, ys, rng if shuffle else None)
        for k in range(0, n, batch_size):
            yield x_all[k : k + batch_size], None if y_all is None else y_all[k : k + batch_size]


def _merge(xs, ys, rng: np.random.Generator | None):
    x = np.concatenate(xs)
    y = None if ys[0] is None else np.concatenate(ys)
    if rng is not None:
        perm = rng.permutation(len(x))
        x, y = x[perm], None if y is None else y[perm]
    return x, y


class EpochSeed(L.Callback):
    """Gives the training stream its epoch before each epoch's iterator starts (shuffle = f(seed, epoch))."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = trainer.datamodule
        if datamodule is not None and hasattr(datamodule, "set_epoch"):
            datamodule.set_epoch(trainer.current_epoch)


class WindowDataModule(L.LightningDataModule):
    """Train/validation windows of one variant's token asset (and input channels) in the training period."""

    def __init__(
        self,
        settings: Settings,
        variant: str,
        *,
        with_labels: bool = False,
        tau: float | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if with_labels and tau is None:
            raise ValueError("with_labels=True needs a tau")
        if tau is not None and tau not in settings.tokenize.taus:
            raise ValueError(f"tau={tau} is not one of tokenize.taus {settings.tokenize.taus}")
        self.settings, self.variant = settings, lookup_variant(variant)
        self.token_asset = self.variant.token_asset
        self.tau = tau if with_labels else None
        self.num_workers = num_workers
        self.train_shards: list[Shard] = []
        self.val_shards: list[Shard] = []
        self._train: WindowStream | None = None
        self._val: WindowStream | None = None

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        cfg = self.settings.train
        shards = list_shards(self.settings, self.token_asset, with_labels=self.tau is not None)
        if not shards:
            raise ValueError(f"no {self.token_asset} windows on or before {self.settings.data.train_end}")
        train_days, val_days = split_days([s.day for s in shards], cfg.val_fraction)
        self.train_shards = [s for s in shards if s.day in set(train_days)]
        self.val_shards = [s for s in shards if s.day in set(val_days)]
        stats = None
        if self.variant.normalized:
            stats = pl.read_parquet(Warehouse(self.settings.warehouse).shard(CORPUS_STATS, "stats"))
        normalize = WindowNormalizer(self.variant, stats)
        common = dict(normalize=normalize, batch_size=cfg.batch_size, seed=cfg.seed, tau=self.tau)
        common["max_windows"] = self.window_cap()
        self._train = WindowStream(self.train_shards, shuffle=True, buffer_windows=cfg.shuffle_buffer, **common)
        self._val = WindowStream(self.val_shards, shuffle=False, buffer_windows=cfg.batch_size, **common)

    def set_epoch(self, epoch: int) -> None:
        if self._train is not None:
            self._train.set_epoch(epoch)

    def _loader(self, stream: WindowStream) -> DataLoader:
        # batch_size=None: the stream yields whole batches; workers split the shard list between them
        return DataLoader(stream, batch_size=None, num_workers=self.num_workers, persistent_workers=False)

    def train_dataloader(self) -> DataLoader:
        self.setup()
        return self._loader(self._train)

    def val_dataloader(self) -> DataLoader:
        self.setup()
        return self._loader(self._val)

    def train_windows(self) -> int:
        """Windows per training epoch (before label filtering), after the cap."""
        self.setup()
        total = sum(s.windows for s in self.train_shards)
        if self.tau is not None:
            total = int(sum(self.class_counts().values()))
        cap = self.window_cap()
        return total if cap is None else min(total, cap)

    def window_cap(self) -> int | None:
        """Windows per epoch at most: the fine-tuning cap for labelled streams when one is set."""
        cfg = self.settings.train
        if self.tau is not None and cfg.finetune_max_windows_per_epoch is not None:
            return cfg.finetune_max_windows_per_epoch
        return cfg.max_windows_per_epoch

    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.train_windows() / self.settings.train.batch_size))

    def class_counts(self) -> dict[str, int]:
        """Buy/Sell/Hold counts of the known labels over the training split (label shards only)."""
        self.setup()
        if self.tau is None:
            raise ValueError("class_counts needs labels (with_labels=True, tau=...)")
        col = tau_column(self.tau)
        labels = pl.read_parquet([s.label_path for s in self.train_shards], columns=[col])[col]
        return {name: int((labels == k).sum()) for k, name in enumerate(ACTION_KEYS)}

    def shards_used(self) -> list[dict]:
        """Lineage: every shard this module streams from, with its content hash and split."""
        self.setup()
        rows = []
        for split, shards in (("train", self.train_shards), ("val", self.val_shards)):
            for s in shards:
                day = s.day.isoformat()
                row = dict(split=split, date=day, path=s.path, content_hash=s.content_hash, windows=s.windows)
                rows.append({"asset": self.token_asset, **row})
                if s.label_path is not None:
                    rows.append({"asset": LABELS, **row, "path": s.label_path, "content_hash": s.label_hash})
        return rows
