"""A tokenization: how a window of log prices and log volumes becomes tokens, and all that is named after it.

A ``Tokenization`` owns its ``name`` and every asset name derived from it (``spline``: ``spline_tokens``,
``spline_corpus_stats``, ``spline_window_store``, ``spline_features``), its ``channels`` (name, title,
normalization, dtype), ``tokenize`` (the public wrapper over its kernel in ``tokenize/``, as stumpy's ``stump``
over ``_stump``), the extra shard columns it writes, ``normalize`` (each channel anchored to the window's first
token, z-scored with the corpus statistics or left as stored, as the channel says) and ``features`` (what a
probe reads of a window). One module per tokenization beside this one; the registry is
``tokenizations.TOKENIZATIONS``; Chronos's ``ChronosTokenizer`` has this shape. Pure numpy/polars: no dagster,
no torch, no numba at import (the settings and the variants read the registry).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl

from kinematic_pipeline.windows import N_TOKENS

NORMALIZATIONS = ("anchor", "zscore", "none")
N_LAST = 5  # the last tokens a probe sees


@dataclass(frozen=True)
class Channel:
    """One channel of a token."""

    name: str  # its ``channel_name`` in corpus_stats (``c0``)
    title: str  # what it is, for figures ("velocity")
    normalization: str = "zscore"  # "anchor": minus the window's first token; "zscore": corpus statistics; "none"
    dtype: str = "float32"  # as stored in the token shards

    def __post_init__(self) -> None:
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(
                f"channel {self.name}: normalization {self.normalization!r} is not one of {NORMALIZATIONS}"
            )


class Workspace:
    """Output buffers reused from block to block: first-touch page faults of fresh multi-hundred-MB arrays
    cost more than the kernels themselves on this VM."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        key = (name, shape[1:])
        buf = self._buffers.get(key)
        if buf is None or buf.shape[0] < shape[0] or buf.dtype != np.dtype(dtype):
            buf = np.empty((max(shape[0], 1),) + tuple(shape[1:]), dtype=dtype)
            self._buffers[key] = buf
        return buf[: shape[0]]


@dataclass(frozen=True)
class Tokenization(ABC):
    """What every tokenization has; its class says how its tokens are computed (``tokenize``)."""

    name: str  # the short name: corpus_stats' ``tokenization`` column, folders, feature sets (``spline``)
    channels: tuple[Channel, ...]
    description: str  # the token asset's, in the UI
    called: str  # what the verdict calls it ("spline vs finite differences")

    extra_columns: ClassVar[dict[str, pl.DataType]] = {}  # shard columns beside the tokens (the splines' end_position)

    @property
    def tokens_asset(self) -> str:
        """The token asset: a folder of day shards and a catalog view (``spline_tokens``)."""
        return f"{self.name}_tokens"

    @property
    def corpus_stats_asset(self) -> str:
        """The asset of its channel statistics (``corpus_stats/<name>.parquet``)."""
        return f"{self.name}_corpus_stats"

    @property
    def window_store_asset(self) -> str:
        """The asset of its training-period windows in one memory-mapped file (``window_store.py``)."""
        return f"{self.name}_window_store"

    @property
    def features_asset(self) -> str:
        """The asset of its windows' decision-time features (``features/<name>/``)."""
        return f"{self.name}_features"

    @property
    def n_channels(self) -> int:
        return len(self.channels)

    @property
    def window_bytes(self) -> int:
        """One stored window: 64 tokens x its channels, float32 (the window store's row)."""
        return N_TOKENS * self.n_channels * 4

    @property
    def anchored(self) -> tuple[int, ...]:
        """The channels anchored to each window's first token (dual window anchoring: c0 and c~0)."""
        return tuple(k for k, c in enumerate(self.channels) if c.normalization == "anchor")

    @property
    def zscored(self) -> tuple[int, ...]:
        """The channels z-scored with the corpus statistics (one row each per fold)."""
        return tuple(k for k, c in enumerate(self.channels) if c.normalization == "zscore")

    @property
    def shard_schema(self) -> dict[str, pl.DataType]:
        """The columns of one of its token shards: one window [64, channels] per ticker and day."""
        return {
            "ticker": pl.String,
            "date": pl.Date,
            "n_missing_price": pl.Int8,
            "n_missing_volume": pl.Int8,
            "tokens": pl.Array(pl.Float32, (N_TOKENS, self.n_channels)),
            **self.extra_columns,
        }

    @abstractmethod
    def tokenize(self, windows, alphas, workspace: Workspace | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """float32 [n, 64, channels] tokens of ``windows`` (``log_price`` [n, 65], ``log_volume`` [n, 64], knot
        ``times`` or None, ``tickers``: ``stages.tokenize.DayWindows``) and its ``extra_columns``, one value per
        window. ``alphas``: the smoothing (``stages.alpha.AlphaLookup``), for a tokenization that smooths."""

    def parameters(self, alphas) -> dict[str, str]:
        """What its token manifests record of ``alphas`` (a tokenization that does not smooth: nothing)."""
        return {"alpha_price": "", "alpha_volume": ""}

    def _out(self, workspace: Workspace | None, n: int) -> np.ndarray:
        return (workspace or Workspace()).get(f"tokens:{self.tokens_asset}", (n, N_TOKENS, self.n_channels), np.float32)

    def normalize(self, tokens: np.ndarray, stats: pl.DataFrame) -> np.ndarray:
        """Windows [n, 64, channels] -> float32 model input: anchored channels minus the window's first token,
        z-scored ones with ``stats`` (corpus_stats rows of one fold), the others as stored."""
        rows = stats.filter(pl.col("tokenization") == self.name).sort("channel")
        if rows.height != len(self.zscored):
            raise ValueError(f"corpus_stats has no statistics for tokenization {self.name!r}")
        out = np.array(tokens, dtype=np.float32, copy=True)  # [n, 64, C]
        for ch in self.anchored:
            out[:, :, ch] -= out[:, :1, ch]
        channels = list(self.zscored)
        out[:, :, channels] = (out[:, :, channels] - rows["mean"].to_numpy()) / rows["std"].to_numpy()
        return out

    def normalizer(self, stats: pl.DataFrame | None, channels: tuple[int, ...] | None = None):
        """Windows [n, 64, C] -> a model's input: ``normalize`` with ``stats`` (corpus_stats of one fold), or, for a
        model that normalizes its own input (PatchTST's RevIN), its ``channels`` as stored (float32)."""
        if channels is not None:
            return functools.partial(_select, channels=tuple(channels))
        if stats is None:
            raise ValueError(f"the {self.name} tokens' normalization needs corpus_stats ({self.corpus_stats_asset})")
        return functools.partial(self.normalize, stats=stats)

    @property
    def token_features(self) -> tuple[str, ...]:
        """The window features' columns: the last five tokens' channels, then each channel's window std."""
        last = tuple(f"t{k}_c{c}" for k in range(N_TOKENS - N_LAST, N_TOKENS) for c in range(self.n_channels))
        return last + tuple(f"std_c{c}" for c in range(self.n_channels))

    @property
    def feature_sets(self) -> dict[str, tuple[str, ...]]:
        """The feature sets of its features file a probe may read: name -> columns."""
        return {self.name: self.token_features}

    def features(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """The decision-time features of windows [n, 64, C]: the last five tokens (float32, anchored channels
        minus the window's first token) and each channel's standard deviation over the window (shift-invariant,
        so anchoring does not change it); ``token_features`` name them."""
        tokens = np.asarray(tokens, dtype=np.float32)
        last = tokens[:, N_TOKENS - N_LAST :, :].copy()
        for ch in self.anchored:
            last[:, :, ch] -= tokens[:, :1, ch]
        std = tokens.astype(np.float64).std(axis=1, ddof=0).astype(np.float32)
        values = np.concatenate([last.reshape(len(tokens), -1), std], axis=1)
        return {name: values[:, j] for j, name in enumerate(self.token_features)}


def _select(tokens: np.ndarray, channels: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(tokens[:, :, list(channels)], dtype=np.float32)
