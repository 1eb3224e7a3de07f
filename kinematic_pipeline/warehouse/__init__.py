"""The disk: every file of ``$KP_WAREHOUSE``, how it is written and how it is read back. ``Settings.warehouse`` is a
``Warehouse`` (``store.py``); importers take it and the asset names from here.

- ``layout.py``: the tree, every folder and file name;
- ``store.py``: the ``Warehouse``, the paths of shards, manifests, model folders and reports, and its reads;
- ``day_units.py``: a trading day's shards and manifests written as one unit (one rename);
- ``atomic.py``: atomic files (stage, fsync on request, rename) and their sha256: the one way a file is written;
- ``no_follow.py``: the locks and an appended trace, opened in place without following a symbolic link;
- ``catalog.py``: the DuckDB catalog, views over the shards;
- ``repair.py``: what the catalog does with a file DuckDB cannot read, and the older flat layout's upgrade;
- ``verified.py``: reads checked against the sha256 recorded when a file was written (sidecars, model manifests);
- ``exact_paths.py``: a file read by its exact path, never a pattern.
"""

from kinematic_pipeline.warehouse.layout import (
    ALPHA_ESTIMATES,
    BACKTESTS,
    CORPUS_STATS,
    EQUITY_CURVES,
    LABELS,
    MARGIN_BACKTESTS,
    PREDICTIONS,
    PROVENANCE,
    QUARANTINE,
    RAW_OHLCV,
    TARGETING_BACKTESTS,
    TRADES,
)
from kinematic_pipeline.warehouse.store import CorruptShardError, Warehouse

__all__ = [
    "ALPHA_ESTIMATES",
    "BACKTESTS",
    "CORPUS_STATS",
    "EQUITY_CURVES",
    "LABELS",
    "MARGIN_BACKTESTS",
    "PREDICTIONS",
    "PROVENANCE",
    "QUARANTINE",
    "RAW_OHLCV",
    "TARGETING_BACKTESTS",
    "TRADES",
    "CorruptShardError",
    "Warehouse",
]
