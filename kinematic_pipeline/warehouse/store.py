"""Where every file of the warehouse lives, and its reads: ``Settings.warehouse`` is a ``Warehouse``.

Stages ask it for paths (shards, manifests, day units, window stores, model folders, a policy's evaluation files,
reports) and for the catalog (``query``, views); writes go through it so that ``KP_DURABLE_WRITES`` (read once by
``config.load_settings``) applies everywhere. The names are ``layout.py`` (the asset names are re-exported by the
package), a day's writes ``day_units.py``, atomic files ``atomic.py``, the DuckDB catalog ``catalog.py`` and what
repairs it ``repair.py``. No dagster here.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kinematic_pipeline.policy import Policy
from kinematic_pipeline.warehouse import day_units, layout
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import PARQUET_COMPRESSION, register_warehouse, write_parquet_atomic
from kinematic_pipeline.warehouse.catalog import catalog_file, query, refresh_view
from kinematic_pipeline.warehouse.repair import REPAIR
from kinematic_pipeline.warehouse.verified import process_sha256, without_sidecars


class CorruptShardError(ValueError):
    """A shard's bytes differ from the sha256 its manifest recorded when it was written."""


@dataclass(frozen=True)
class Warehouse:
    """``$KP_WAREHOUSE``, every file in it by name (the tree: ``layout.py``). Building one touches no file: its path
    getters only compute paths, and ``load_settings`` moves the days of an older warehouse's flat layout into day
    units once per process (``repair.upgrade_flat_days_once``). It reads as its root path where a path is
    expected (``os.fspath``, ``/``, ``str``)."""

    root: Path
    durable: bool = False  # fsync every file before its rename (KP_DURABLE_WRITES=1)
    repair = REPAIR  # what the catalog does with a file DuckDB cannot read (``repair.py``)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        register_warehouse(self.root)  # nothing written under it lands outside it (``atomic.inside_warehouse``)

    def __fspath__(self) -> str:
        return os.fspath(self.root)

    def __truediv__(self, other) -> Path:
        return self.root / other

    def __str__(self) -> str:
        return str(self.root)

    def exists(self) -> bool:
        return self.root.exists()

    @property
    def catalog_path(self) -> Path:
        """``catalog.duckdb`` (``catalog.catalog_file``: elsewhere only for a path DuckDB cannot open)."""
        return catalog_file(self.root)

    def write(self, frame: pl.DataFrame, path: Path, compression: str = PARQUET_COMPRESSION) -> str:
        """``atomic.write_parquet_atomic`` with this warehouse's durability; the file's sha256."""
        return write_parquet_atomic(frame, path, compression, durable=self.durable)

    # --- shards and manifests -------------------------------------------------------------------------

    def shard(self, asset: str, key: dt.date | str) -> Path:
        """``<asset>/<key>.parquet``: a trading day's shard, or a named one (``stats``, ``splinegpt_tau0.01``);
        for a member of a day unit (``raw_ohlcv``, ``quarantine``), its file in ``<unit>/<day>/``."""
        unit = layout.UNIT_OF.get(asset)
        if unit is not None:
            return self.unit_dir(unit, key) / layout.DAY_UNITS[unit][asset]
        return self.root / asset / f"{key}.parquet"

    def manifest(self, asset: str, day: dt.date | str) -> Path:
        if asset in layout.DAY_UNITS:
            return self.unit_dir(asset, day) / layout.DAY_UNITS[asset]["manifest"]
        return self.root / layout.MANIFESTS_DIR / asset / f"{day}.parquet"

    def unit_dir(self, asset: str, day: dt.date | str) -> Path:
        """``<asset>/<day>/``: the folder of a day unit (``layout.DAY_UNITS``)."""
        return self.root / asset / str(day)

    def shard_days(self, asset: str, *, after: dt.date | None = None, until: dt.date | None = None) -> list[dt.date]:
        """Sorted days of ``asset``'s shards with ``after < day <= until`` (file names only: nothing is opened)."""
        if asset in layout.DAY_UNITS:
            return day_units.unit_days(self.root / asset, after, until)
        return _days_in(self.root / asset, after, until)

    def manifest_days(self, asset: str) -> list[dt.date]:
        """Sorted days whose ``asset`` shard has a manifest (a shard counts once its manifest is written)."""
        if asset in layout.DAY_UNITS:
            return day_units.unit_days(self.root / asset)  # a unit exists whole or not at all
        return _days_in(self.root / layout.MANIFESTS_DIR / asset, None, None)

    def manifest_row(self, asset: str, day: dt.date, columns: list[str] | None = None) -> dict:
        path = self.manifest(asset, day)
        if not path.exists():
            raise FileNotFoundError(f"{asset} partition {day} has no manifest ({path}); materialize {asset} for it")
        return exact.read_parquet(path, columns=columns).row(0, named=True)

    def content_hash(self, asset: str, day: dt.date, default: str | None = None) -> str:
        """The sha256 its manifest records for ``asset``'s shard of ``day`` (``default`` if there is none)."""
        if default is not None and not self.manifest(asset, day).exists():
            return default
        return self.manifest_row(asset, day, ["content_hash"])["content_hash"]

    def manifest_rows(self, asset: str, days: list[dt.date], columns: list[str]) -> list[dict]:
        """``manifest_row`` of many days, in their order, in one read of their manifests."""
        if not days:
            return []
        frame = exact.read_parquet([self.manifest(asset, d) for d in days], columns=["partition_date", *columns])
        by_day = {row.pop("partition_date"): row for row in frame.iter_rows(named=True)}
        return [by_day[d] for d in days]

    def verified_shards(self, asset: str, days: list[dt.date]) -> list[Path]:
        """The shards of ``asset`` on ``days``, each hashed and compared with its manifest's sha256 before it is read
        (once per process while a shard stays the same file: ``verified.process_sha256``; threads: hashing releases
        the GIL); ``CorruptShardError`` naming the file, both hashes and the partition to re-materialize for the
        first whose bytes differ (a flipped bit, an edit, a truncation)."""
        from concurrent.futures import ThreadPoolExecutor

        paths = [self.shard(asset, d) for d in days]
        recorded = self.content_hashes(asset, days)
        with ThreadPoolExecutor(max_workers=4) as pool:
            actual = list(pool.map(lambda p: process_sha256(p) if p.exists() else "", paths))
        for day, path, want, got in zip(days, paths, recorded, actual):
            if want != got:
                size = f"{path.stat().st_size:,} bytes" if path.exists() else "missing"
                raise CorruptShardError(
                    f"{path} ({size}) is not the file its manifest records (sha256 {got[:16] or '-'}, the manifest "
                    f"says {want[:16]}): damaged or edited after it was written. Re-materialize {asset} for {day} "
                    f"(python -m kinematic_pipeline materialize --select {asset})"
                )
        return paths

    def content_hashes(self, asset: str, days: list[dt.date]) -> list[str]:
        """``content_hash`` of many days, in their order."""
        return [row["content_hash"] for row in self.manifest_rows(asset, days, ["content_hash"])]

    # --- writing a day: ``day_units.py``, whose functions take the warehouse first (so they read as methods) ---

    write_shard = day_units.write_shard  # a day's shard, then its manifest (a day unit's swapped in whole)
    day_lock = day_units.day_lock  # one writer of a day of an asset at a time
    ensure_unit_views = day_units.ensure_unit_views  # the typed ``_schema`` files and views of a day-unit asset

    # --- derived files ------------------------------------------------------------------------------

    def window_store_dir(self, asset: str) -> Path:
        """``window_store/<token asset>/``: the training-period windows of a token asset (``window_store.py``)."""
        return self.root / layout.WINDOW_STORE_DIR / asset

    def corpus_stats_file(self, tokenization: str) -> Path:
        """``corpus_stats/<tokenization>.parquet``: one tokenization's channel statistics (view ``corpus_stats``)."""
        return self.shard(layout.CORPUS_STATS, tokenization)

    def features_file(self, tokenization: str, part: str) -> Path:
        """``features/<tokenization>/<part>.parquet``: the decision-time features of every ticker-day, ``training``
        (the train and validation rows a probe is fitted on) or ``test`` (the universe after the cut)."""
        return self.root / layout.FEATURES_DIR / tokenization / f"{part}.parquet"

    def features_inputs_file(self, tokenization: str) -> Path:
        """``features/<tokenization>/inputs.parquet``: the store and test shards the features were built from."""
        return self.root / layout.FEATURES_DIR / tokenization / "inputs.parquet"

    def features_days_file(self, tokenization: str) -> Path:
        """``features/<tokenization>/days.parquet``: the content hash of every token and raw_ohlcv day the features
        were built from (look-back and next session included); a reader refuses them once one changed."""
        return self.root / layout.FEATURES_DIR / tokenization / "days.parquet"

    def features_cut_file(self, tokenization: str) -> Path:
        """``features/<tokenization>/cut.json``: the walk-forward folds (training ends, test periods) the features
        were split for; a reader under other folds refuses them (``stages.features.check_features_cut``)."""
        return self.root / layout.FEATURES_DIR / tokenization / "cut.json"

    def probe_dir(self, policy: Policy) -> Path:
        """``models/<variant>/seed=<seed>/probe/tau=<tau>/``: a fitted probe (model and ``fit.json``)."""
        return self.model_dir(policy) / "probe" / f"tau={policy.task.key}"

    def alpha_estimates_file(self) -> Path:
        return self.shard(layout.ALPHA_ESTIMATES, "estimates")

    # --- models -----------------------------------------------------------------------------------------

    def model_dir(self, policy: Policy) -> Path:
        """``models/<variant>/seed=<seed>/`` (a fold's: ``.../fold=<fold>/seed=<seed>/``)."""
        base = self.root / layout.MODELS_DIR / policy.variant.name
        fold = policy.fold.name
        return (base if fold is None else base / f"fold={fold}") / f"seed={policy.seed}"

    def foundation_dir(self, policy: Policy) -> Path:
        return self.model_dir(policy) / "foundation"

    def foundation_checkpoint(self, policy: Policy) -> Path:
        return self.foundation_dir(policy) / layout.MODEL_FILE

    def adapter_dir(self, policy: Policy) -> Path:
        return self.model_dir(policy) / "adapters" / policy.task.folder  # tau=0.01

    def adapter_pin(self, policy: Policy) -> Path:
        """``foundation.json`` in the adapter's folder: its foundation's sha256 and the class weights it was
        fine-tuned with (``model_pins``)."""
        return self.adapter_dir(policy) / layout.PIN_FILE

    def probe_fit(self, policy: Policy) -> Path:
        """``fit.json`` in the probe's folder: how it was fitted (rows, days, scaler, class weights)."""
        return self.probe_dir(policy) / layout.PROBE_FIT_FILE

    def probe_files(self, policy: Policy) -> list[Path]:
        """The files of a fitted probe (its model, its fit record); a clear error naming the asset when it was not
        fitted, or was saved by an older version as a pickle (never loaded)."""
        folder, asset = self.probe_dir(policy), policy.variant.asset("probe")
        models = [folder / name for name in layout.PROBE_MODEL_FILES.values() if (folder / name).exists()]
        if not models and (folder / layout.PROBE_LEGACY_PICKLE).exists():
            raise ValueError(
                f"{folder / layout.PROBE_LEGACY_PICKLE} is a pickle saved by an older version: it is not loaded (a "
                f"pickle runs code); re-materialize {asset} partition {policy.key}"
            )
        if len(models) != 1 or not self.probe_fit(policy).exists():
            raise FileNotFoundError(f"{folder} holds no fitted probe: materialize {asset} partition {policy.key}")
        return [models[0], self.probe_fit(policy)]

    def shards_used(self, model_dir: Path) -> Path:
        """What a foundation or adapter folder trained on (``training/data.py``)."""
        return Path(model_dir) / layout.SHARDS_USED_FILE

    def model_count(self, variant: str) -> tuple[int, int]:
        """(foundations, adapters) of ``variant`` in the warehouse, over every seed."""
        root = self.root / layout.MODELS_DIR / variant
        foundations = root.glob(f"**/seed=*/foundation/{layout.MODEL_FILE}")
        return len(list(foundations)), len(list(root.glob("**/seed=*/adapters/tau=*")))

    def has_adapter(self, policy: Policy) -> bool:
        """Whether the fine-tuned head of ``policy`` was saved."""
        return policy.variant.head.saved(self.adapter_dir(policy))

    def adapter_files(self, policy: Policy) -> list[Path]:
        """The files that define the fine-tuned head of ``policy``, sorted."""
        return without_sidecars(policy.variant.head.files(self.adapter_dir(policy)))

    def policy_files(self, policy: Policy) -> tuple[Path, Path]:
        """(foundation model.pt, adapter folder) of a fine-tuned policy; a clear error when either is missing."""
        foundation, adapter = self.foundation_checkpoint(policy), self.adapter_dir(policy)
        if not foundation.exists():
            raise FileNotFoundError(
                f"{foundation} is missing: materialize {policy.variant.name}_foundation partition {policy.fit_key}"
            )
        if not self.has_adapter(policy):
            raise FileNotFoundError(
                f"{adapter} holds no adapter: materialize {policy.variant.name}_adapter partition {policy.key}"
            )
        return foundation, adapter

    # --- a policy's evaluation files --------------------------------------------------------------------

    def evaluation_file(self, asset: str, policy: Policy) -> Path:
        """``<asset>/<policy stem>.parquet``: a policy's predictions, backtests, equity curves, trades, ..."""
        return self.shard(asset, policy.stem)

    def benchmark_file(self, asset: str, fold: str | None = None) -> Path:
        """``<asset>/buy_and_hold.parquet`` (a fold's: ``buy_and_hold_fold2019.parquet``): the Buy & Hold rows,
        written once per fold (every policy of the fold writes the same)."""
        return self.shard(asset, "buy_and_hold" if fold is None else f"buy_and_hold_fold{fold}")

    def predictions_file(self, policy: Policy) -> Path:
        """``predictions/<stem>.parquet``: a Buy/Sell/Hold policy's predictions (the ``predictions`` view); another
        task's in its own folder, ``predictions/<kind>/<stem>.parquet`` (its view: ``Task.predictions_view``)."""
        return self.root / layout.PREDICTIONS / policy.task.predictions_folder / f"{policy.stem}.parquet"

    def predictions_extra(self, folder: str, policy: Policy) -> Path:
        """``predictions/<folder>/<stem>.parquet``: the validation-day predictions (``validation``), the
        shards a prediction read (``inputs``), the model files' hashes (``model``), the calibration fitted on the
        validation days (``calibration``) and the universe predictions at the report's tau, calibrated
        (``universe``) and raw (``universe_raw``); subfolders, so not part of the ``predictions`` view. Another
        task's under its own folder: ``predictions/<kind>/<folder>/``."""
        return self.predictions_folder(folder, policy.task.predictions_folder) / f"{policy.stem}.parquet"

    def predictions_folder(self, folder: str, task_folder: str = "") -> Path:
        """``predictions/<folder>`` (Buy/Sell/Hold's), or under another task's folder."""
        return self.root / layout.PREDICTIONS / task_folder / folder

    # --- reports --------------------------------------------------------------------------------------

    @property
    def reports_dir(self) -> Path:
        return self.root / layout.REPORTS_DIR

    @property
    def report_tables_dir(self) -> Path:
        return self.reports_dir / "tables"

    @property
    def figures_dir(self) -> Path:
        return self.reports_dir / "figures"

    @property
    def pooled_dir(self) -> Path:
        """``reports/pooled/``: the pooled evaluation frames the paper tables wrote (``stages.pooled``)."""
        return self.reports_dir / layout.POOLED_DIR

    @property
    def budget_test_file(self) -> Path:
        """``reports/budget_test.parquet``: each family's best validation loss at its step budget and at twice it, and
        its adapter fine-tuned from a random backbone, on one fold (written by ``benchmarks/bench_budget.py``)."""
        return self.reports_dir / "budget_test.parquet"

    @property
    def learnability_test_file(self) -> Path:
        """``reports/learnability_test.parquet``: each family's validated fine-tuning states on one fold and the test
        scores of each (written by ``benchmarks/bench_learnability.py``)."""
        return self.reports_dir / "learnability_test.parquet"

    @property
    def tables_file(self) -> Path:
        return self.reports_dir / layout.TABLES_FILE

    @property
    def report_file(self) -> Path:
        return self.reports_dir / layout.REPORT_FILE

    # --- the catalog --------------------------------------------------------------------------------------

    def refresh_view(self, view: str, schema: dict[str, pl.DataType], folder: Path | None = None) -> None:
        """(Re)create ``view`` over the ``*.parquet`` of ``folder`` (default: the asset folder named ``view``)."""
        refresh_view(self.root, view, self.root / view if folder is None else folder, schema, self.repair)

    def refresh_manifest_view(self, asset: str, schema: dict[str, pl.DataType]) -> None:
        self.refresh_view(f"{asset}_manifest", schema, self.root / layout.MANIFESTS_DIR / asset)

    def query(self, sql: str, params: list | None = None) -> pl.DataFrame:
        """A read-only query of the catalog (``?`` placeholders bound to ``params``) as a Polars frame."""
        return query(self.root, sql, params, self.repair)

    def read_view(self, view: str) -> pl.DataFrame:
        """Every row of a catalog view (an asset's shards, as DuckDB reads them)."""
        return self.query(f'SELECT * FROM "{view}"')


def _days_in(folder: Path, after: dt.date | None, until: dt.date | None) -> list[dt.date]:
    if not folder.is_dir():
        return []
    days = (dt.date.fromisoformat(p.stem) for p in folder.glob("*.parquet") if layout.is_day_name(p.stem))
    return sorted(d for d in days if (after is None or d > after) and (until is None or d <= until))
