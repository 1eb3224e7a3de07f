"""The layout of the warehouse: the one place that knows where every file lives, and the asset names.

``Settings.warehouse`` is a ``Warehouse``: stages ask it for paths (shards, manifests, day units, window
stores, model folders, a policy's evaluation files, reports) and for the catalog (``query``, views); writes go
through it so that ``KP_DURABLE_WRITES`` (read once by ``config.load_settings``) applies everywhere. Atomic
files are ``atomic_files.py``, the DuckDB catalog ``catalog.py``. No dagster here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kinematic_pipeline import exact_paths as exact
from kinematic_pipeline.atomic_files import (
    PARQUET_COMPRESSION,
    UMASK,
    file_sha256,
    same_files,
    swap_in_folder,
    write_bytes_atomic,
    write_parquet_atomic,
    write_staged_file,
)
from kinematic_pipeline.catalog import catalog_connection, create_view, query, refresh_view, sql_str
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.token_kinds import TOKEN_ASSETS
from kinematic_pipeline.variants import variant as lookup_variant

# Asset names: each is the folder of its shards under the warehouse and the name of its catalog view.
RAW_OHLCV, QUARANTINE = "raw_ohlcv", "quarantine"
# Assets whose trading day is one unit: a folder ``<asset>/<day>/`` holding the shard (``bars.parquet``,
# ``tokens.parquet``), its companions (the quarantine) and its manifest, swapped in whole by one atomic rename:
# a crash never leaves a shard beside another shard's manifest. Each member has a catalog view over
# ``<asset>/*/<file>``, which always matches the typed zero-row files of ``<asset>/_schema/``.
DAY_UNITS: dict[str, dict[str, str]] = {
    RAW_OHLCV: {RAW_OHLCV: "bars.parquet", QUARANTINE: "quarantine.parquet", "manifest": "manifest.parquet"},
    **{kind: {kind: "tokens.parquet", "manifest": "manifest.parquet"} for kind in TOKEN_ASSETS},
    "labels": {"labels": "labels.parquet", "manifest": "manifest.parquet"},
}
UNIT_OF = {member: asset for asset, members in DAY_UNITS.items() for member in members if member != "manifest"}
SCHEMA_DIR, STAGING_DIR = "_schema", ".staging"
_UPGRADED: set[tuple[str, str]] = set()  # (warehouse, day-unit asset) whose older flat days were moved this process
ALPHA_ESTIMATES, LABELS, CORPUS_STATS = "alpha_estimates", "labels", "corpus_stats"
PREDICTIONS, BACKTESTS, EQUITY_CURVES, TRADES, PROVENANCE = (
    "predictions",
    "backtests",
    "equity_curves",
    "trades",
    "provenance",
)
MARGIN_BACKTESTS = "margin_backtests"  # the second decision rule's backtests (beside the paper's argmax)
REPORTS_DIR, TABLES_FILE, REPORT_FILE = "reports", "tables.md", "report.md"
MODEL_FILE = "model.pt"  # a foundation's weights: {"variant", "model_config", "state_dict"}
PIN_FILE = "foundation.json"  # beside each adapter: the sha256 of the foundation it was fine-tuned from
SHARDS_USED_FILE = "shards_used.parquet"  # beside each checkpoint/adapter: the store and shards it trained on
SHARDS_USED_SCHEMA: dict[str, pl.DataType] = {
    "asset": pl.String,  # the token asset, labels, or the window store (split "store")
    "split": pl.String,  # train | val | store
    "date": pl.String,
    "path": pl.String,
    "content_hash": pl.String,
    "windows": pl.Int64,  # windows of the day (of the whole store for the store's row)
    "served": pl.Int64,  # windows of it served over every epoch (0: never drawn)
}


class StalePairError(ValueError):
    """A derived artefact was built from another version of its input than the one on disk now."""


class CorruptShardError(ValueError):
    """A shard's bytes differ from the sha256 its manifest recorded when it was written."""


@dataclass(frozen=True)
class Warehouse:
    """``$KP_WAREHOUSE``, every file in it by name.

    - ``<asset>/<YYYY-MM-DD>.parquet``: one shard per trading-day partition, with
      ``manifests/<asset>/<day>.parquet`` beside it (its content hash and counts);
    - ``raw_ohlcv/<YYYY-MM-DD>/`` (``DAY_UNITS``): a day as one unit, ``bars.parquet`` (the kept bars),
      ``quarantine.parquet`` (only when rows were quarantined) and ``manifest.parquet``, replaced together
      by one atomic rename (``write_shard`` with ``companions``); ``raw_ohlcv/_schema/`` holds typed
      zero-row twins so that the catalog's globs always match; the token assets and the labels likewise
      (``<token asset>/<YYYY-MM-DD>/tokens.parquet``, ``labels/<YYYY-MM-DD>/labels.parquet``, each with its
      ``manifest.parquet``);
    - ``alpha_estimates/estimates.parquet``, ``corpus_stats/<tokenization>.parquet``,
      ``window_store/<token asset>/`` (``window_store.py``);
    - ``models/<variant>/seed=<seed>/foundation/model.pt`` and ``.../seed=<seed>/adapters/tau=<tau>/``,
      each with the ``shards_used.parquet`` it trained on; a probe's ``models/<probe>/seed=0/probe/tau=<tau>/``;
    - ``features/<tokenization>/``: the probes' and rules' decision-time features, ``training.parquet`` (the
      training period's rows: what a probe is fitted on) and ``test.parquet``, and ``inputs.parquet`` (what
      they were built from);
    - ``<evaluation asset>/<policy stem>.parquet`` (``Policy.stem``), ``predictions/validation/``,
      ``predictions/inputs/`` and ``predictions/universe/`` beside the predictions, ``<asset>/buy_and_hold.parquet``;
    - ``reports/``: ``tables/``, ``tables.md``, ``figures/``, ``report.md``;
    - ``catalog.duckdb``: views over the shards, with globs relative to the warehouse.

    It reads as its root path where a path is expected (``os.fspath``, ``/``, ``str``).
    """

    root: Path
    durable: bool = False  # fsync every file before its rename (KP_DURABLE_WRITES=1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

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
        from kinematic_pipeline.catalog import catalog_file

        return catalog_file(self.root)

    def write(self, frame: pl.DataFrame, path: Path, compression: str = PARQUET_COMPRESSION) -> str:
        """``atomic_files.write_parquet_atomic`` with this warehouse's durability; the file's sha256."""
        return write_parquet_atomic(frame, path, compression, durable=self.durable)

    # --- shards and manifests -------------------------------------------------------------------------

    def shard(self, asset: str, key: dt.date | str) -> Path:
        """``<asset>/<key>.parquet``: a trading day's shard, or a named one (``stats``, ``splinegpt_tau0.01``);
        for a member of a day unit (``raw_ohlcv``, ``quarantine``), its file in ``<unit>/<day>/``."""
        if asset in UNIT_OF:
            self._upgraded(UNIT_OF[asset])
            return self.unit_dir(UNIT_OF[asset], key) / DAY_UNITS[UNIT_OF[asset]][asset]
        return self.root / asset / f"{key}.parquet"

    def manifest(self, asset: str, day: dt.date | str) -> Path:
        if asset in DAY_UNITS:
            self._upgraded(asset)
            return self.unit_dir(asset, day) / DAY_UNITS[asset]["manifest"]
        return self.root / "manifests" / asset / f"{day}.parquet"

    def unit_dir(self, asset: str, day: dt.date | str) -> Path:
        """``<asset>/<day>/``: the folder of a day unit (``DAY_UNITS``)."""
        return self.root / asset / str(day)

    def shard_days(self, asset: str, *, after: dt.date | None = None, until: dt.date | None = None) -> list[dt.date]:
        """Sorted days of ``asset``'s shards with ``after < day <= until`` (file names only: nothing is opened)."""
        if asset in DAY_UNITS:
            self._upgraded(asset)
            return _unit_days_in(self.root / asset, after, until)
        return _days_in(self.root / asset, after, until)

    def manifest_days(self, asset: str) -> list[dt.date]:
        """Sorted days whose ``asset`` shard has a manifest (a shard counts once its manifest is written)."""
        if asset in DAY_UNITS:
            self._upgraded(asset)
            return _unit_days_in(self.root / asset, None, None)  # a unit exists whole or not at all
        return _days_in(self.root / "manifests" / asset, None, None)

    def _upgraded(self, asset: str) -> None:
        """``upgrade_flat_days`` once per process and warehouse (later calls cost a set lookup)."""
        key = (str(self.root), asset)
        if key not in _UPGRADED:
            self.upgrade_flat_days(asset)
            _UPGRADED.add(key)

    def upgrade_flat_days(self, asset: str) -> int:
        """Move the day shards of a warehouse written before ``asset`` became a day unit (``<asset>/<day>.parquet``
        with ``manifests/<asset>/<day>.parquet``) into their units, each by one rename of a staged folder; a
        shard without its manifest stays where it is (its day is re-written by the next materialization).
        Returns the days moved; a no-op (one stat) once done."""
        flat = self.root / "manifests" / asset
        if asset not in DAY_UNITS or not flat.is_dir():
            return 0
        members, moved = DAY_UNITS[asset], 0
        with self.day_lock(asset, "upgrade"):
            for manifest in sorted(flat.glob("*.parquet")):
                shard = self.root / asset / manifest.name
                if not is_day_name(manifest.stem) or not shard.exists():
                    continue
                staging = self.root / asset / STAGING_DIR / f"{manifest.stem}.upgrade"
                staging.mkdir(parents=True, exist_ok=True)
                shard.rename(staging / members[asset])
                manifest.rename(staging / members["manifest"])
                final = self.unit_dir(asset, manifest.stem)
                if final.exists():  # a unit written since: it is the newer day
                    shutil.rmtree(staging)
                else:
                    staging.rename(final)
                moved += 1
            if not any(flat.iterdir()):
                flat.rmdir()
            days = _unit_days_in(self.root / asset, None, None)
            if moved and days:  # the catalog's views of the asset: over the units now, typed by a moved day
                unit = self.unit_dir(asset, days[0])
                self.ensure_unit_views(
                    asset, {m: dict(pl.read_parquet_schema(unit / name)) for m, name in members.items()}
                )
        if moved:
            import sys

            print(
                f"warehouse {self.root}: moved {moved} {asset} day(s) into day units (shard and manifest "
                "in one folder, swapped as one)",
                file=sys.stderr,
            )
        return moved

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
        """The shards of ``asset`` on ``days``, each re-hashed and compared with its manifest's sha256 before it is
        read (threads: hashing releases the GIL); ``CorruptShardError`` naming the file, both hashes and the
        partition to re-materialize for the first whose bytes differ (a flipped bit, an edit, a truncation)."""
        from concurrent.futures import ThreadPoolExecutor

        paths = [self.shard(asset, d) for d in days]
        recorded = self.content_hashes(asset, days)
        with ThreadPoolExecutor(max_workers=4) as pool:
            actual = list(pool.map(lambda p: file_sha256(p) if p.exists() else "", paths))
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

    def write_shard(
        self,
        asset: str,
        day: dt.date,
        frame: pl.DataFrame,
        record: dict,
        manifest_schema: dict[str, pl.DataType],
        compression: str = PARQUET_COMPRESSION,
        companions: dict[str, pl.DataFrame | None] | None = None,
    ) -> dict:
        """Write a day's shard, then its manifest (``record`` plus the shard's ``content_hash``); return the row.

        For a day unit (``DAY_UNITS``), the shard, its ``companions`` (member name: frame, None or zero rows
        for none; their hashes go to ``<member>_hash``, "" for none) and the manifest are written to a
        staging folder and swapped in by one atomic rename: readers see the old day or the new one, whole.
        """
        with self.day_lock(asset, day):  # one writer of a day at a time: no interleaved unit, no lost staging
            if asset in DAY_UNITS:
                return self._write_unit(asset, day, frame, record, manifest_schema, compression, companions or {})
            record = {**record, "content_hash": self.write(frame, self.shard(asset, day), compression)}
            row = {k: record[k] for k in manifest_schema}
            self.write(pl.DataFrame([row], schema=manifest_schema), self.manifest(asset, day))
            return record

    @contextlib.contextmanager
    def day_lock(self, asset: str, day: dt.date | str, timeout_s: float = 600.0):
        """An exclusive lock on one day of ``asset`` (``.locks/<asset>/<day>.lock``) for as long as it is written:
        two runs over the same partitions (a schedule and a manual backfill) write a day one after the other;
        the second says once whom it waits for (pid, host, since) and stops after ``timeout_s`` naming them."""
        import fcntl
        import socket
        import sys
        import time

        folder = self.root / ".locks" / asset
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{day}.lock"
        with open(path, "a+") as handle:
            deadline, told = time.monotonic() + timeout_s, False
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder = path.read_text().strip() or "another process"
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{asset} {day} is still being written by {holder} after {timeout_s:.0f} s"
                        ) from None
                    if not told:
                        print(f"{asset} {day} is being written by {holder}: waiting", file=sys.stderr)
                        told = True
                    time.sleep(0.05)
            try:
                handle.seek(0)
                handle.truncate()
                handle.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}")
                handle.flush()
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                handle.flush()
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _write_unit(self, asset, day, frame, record, manifest_schema, compression, companions) -> dict:
        members = DAY_UNITS[asset]
        folder = self.root / asset
        staging = folder / STAGING_DIR
        staging.mkdir(parents=True, exist_ok=True)
        for stale in staging.glob(f"{day}.*"):  # left by a writer of this day that was killed: repair
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=staging, prefix=f"{day}."))
        try:
            os.chmod(tmp, 0o777 & ~UMASK)  # mkdtemp's 0700 would become the day's: the user's umask decides
            durable = self.durable
            record = {**record, "content_hash": write_staged_file(frame, tmp / members[asset], compression, durable)}
            for member, companion in companions.items():
                if companion is not None and companion.height:
                    path = tmp / members[member]
                    record[f"{member}_hash"] = write_staged_file(companion, path, compression, durable)
                else:
                    record[f"{member}_hash"] = ""
            row = {k: record[k] for k in manifest_schema}
            manifest = pl.DataFrame([row], schema=manifest_schema)
            write_staged_file(manifest, tmp / members["manifest"], PARQUET_COMPRESSION, durable)
            final = self.unit_dir(asset, day)
            if same_files(tmp, final):
                shutil.rmtree(tmp)  # a re-run with the same input: the day and its mtimes stay untouched
            else:
                swap_in_folder(tmp, final, durable)
                shutil.rmtree(tmp, ignore_errors=True)  # now the old day (if there was one)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return record

    def ensure_unit_views(self, asset: str, schemas: dict[str, dict[str, pl.DataType]]) -> None:
        """The typed zero-row files of ``<asset>/_schema/`` and one view per member of the unit over
        ``<asset>/*/<file>`` (the manifest's view is ``<asset>_manifest``). The globs always match, so the
        views are right at every instant, before, during and after any write: no refresh is needed."""
        members = DAY_UNITS[asset]
        with catalog_connection(self.root) as con:  # its lock: one writer of the _schema files at a time
            for member, schema in schemas.items():
                self.write(pl.DataFrame(schema=schema), self.root / asset / SCHEMA_DIR / members[member])
            for member in schemas:
                view = f"{asset}_manifest" if member == "manifest" else member
                glob = f"{asset}/*/{members[member]}"
                body = f"SELECT * FROM read_parquet({sql_str(glob)}, union_by_name = true)"
                create_view(con, self.root, view, body)

    # --- derived files ------------------------------------------------------------------------------

    def window_store_dir(self, asset: str) -> Path:
        """``window_store/<token asset>/``: the training-period windows of a token asset (``window_store.py``)."""
        return self.root / "window_store" / asset

    def corpus_stats_file(self, tokenization: str) -> Path:
        """``corpus_stats/<tokenization>.parquet``: one tokenization's channel statistics (view ``corpus_stats``)."""
        return self.shard("corpus_stats", tokenization)

    def features_file(self, tokenization: str, part: str) -> Path:
        """``features/<tokenization>/<part>.parquet``: the decision-time features of every ticker-day, ``training``
        (the train and validation rows a probe is fitted on) or ``test`` (the universe after the cut)."""
        return self.root / "features" / tokenization / f"{part}.parquet"

    def features_inputs_file(self, tokenization: str) -> Path:
        """``features/<tokenization>/inputs.parquet``: the store and test shards the features were built from."""
        return self.root / "features" / tokenization / "inputs.parquet"

    def features_cut_file(self, tokenization: str) -> Path:
        """``features/<tokenization>/cut.json``: the walk-forward folds (training ends, test periods) the features
        were split for; a reader under other folds refuses them (``stages.features.check_features_cut``)."""
        return self.root / "features" / tokenization / "cut.json"

    def probe_dir(self, policy: Policy) -> Path:
        """``models/<variant>/seed=<seed>/probe/tau=<tau>/``: a fitted probe (model and ``fit.json``)."""
        return self.model_dir(policy) / "probe" / f"tau={policy.tau_key}"

    def alpha_estimates_file(self) -> Path:
        return self.shard("alpha_estimates", "estimates")

    # --- models -----------------------------------------------------------------------------------------

    def model_dir(self, policy: Policy) -> Path:
        """``models/<variant>/seed=<seed>/`` (a fold's: ``.../fold=<fold>/seed=<seed>/``)."""
        base = self.root / "models" / policy.variant
        return (base if policy.fold is None else base / f"fold={policy.fold}") / f"seed={policy.seed}"

    def foundation_dir(self, policy: Policy) -> Path:
        return self.model_dir(policy) / "foundation"

    def foundation_checkpoint(self, policy: Policy) -> Path:
        return self.foundation_dir(policy) / MODEL_FILE

    def adapter_dir(self, policy: Policy) -> Path:
        return self.model_dir(policy) / "adapters" / f"tau={policy.tau_key}"

    def shards_used(self, model_dir: Path) -> Path:
        """What a foundation or adapter folder trained on (``training/data.py``)."""
        return Path(model_dir) / SHARDS_USED_FILE

    def model_count(self, variant: str) -> tuple[int, int]:
        """(foundations, adapters) of ``variant`` in the warehouse, over every seed."""
        root = self.root / "models" / variant
        return len(list(root.glob(f"**/seed=*/foundation/{MODEL_FILE}"))), len(
            list(root.glob("**/seed=*/adapters/tau=*"))
        )

    def has_adapter(self, policy: Policy) -> bool:
        """Whether the fine-tuned head of ``policy`` was saved."""
        return lookup_variant(policy.variant).head.saved(self.adapter_dir(policy))

    def adapter_files(self, policy: Policy) -> list[Path]:
        """The files that define the fine-tuned head of ``policy``, sorted."""
        return lookup_variant(policy.variant).head.files(self.adapter_dir(policy))

    def pin_foundation(self, adapter_dir: Path, foundation: Path, foundation_sha256: str) -> Path:
        """Record, in an adapter's folder, the foundation (path and sha256) it was fine-tuned from."""
        path = Path(adapter_dir) / PIN_FILE
        record = {"foundation": str(foundation), "foundation_sha256": foundation_sha256}
        write_bytes_atomic(path, json.dumps(record, indent=1).encode(), durable=self.durable)
        return path

    def check_pair(self, policy: Policy) -> str:
        """The foundation's sha256 when the adapter of ``policy`` was fine-tuned from the foundation on disk now;
        ``StalePairError`` naming both hashes and the asset to re-materialize otherwise (a retrained foundation
        under an old adapter, or an adapter with no record of its foundation)."""
        foundation, adapter = self.policy_files(policy)
        key = "|".join(policy.partition.values())
        fix = f"re-materialize {policy.variant}_adapter partition {key}"
        pin = adapter / PIN_FILE
        now = file_sha256(foundation)
        if not pin.exists():
            raise StalePairError(
                f"{adapter} records no foundation (no {PIN_FILE}; the foundation now is {now[:16]}): {fix}"
            )
        pinned = json.loads(pin.read_text())["foundation_sha256"]
        if pinned != now:
            raise StalePairError(
                f"the adapter of {policy} was fine-tuned from foundation sha256 {pinned[:16]}, but {foundation} is now "
                f"sha256 {now[:16]} (the foundation was retrained): {fix}"
            )
        return now

    def policy_files(self, policy: Policy) -> tuple[Path, Path]:
        """(foundation model.pt, adapter folder) of a fine-tuned policy; a clear error when either is missing."""
        foundation, adapter = self.foundation_checkpoint(policy), self.adapter_dir(policy)
        if not foundation.exists():
            raise FileNotFoundError(
                f"{foundation} is missing: materialize {policy.variant}_foundation partition {policy.seed_key}"
            )
        if not self.has_adapter(policy):
            key = "|".join(policy.partition.values())
            raise FileNotFoundError(f"{adapter} holds no adapter: materialize {policy.variant}_adapter partition {key}")
        return foundation, adapter

    # --- a policy's evaluation files --------------------------------------------------------------------

    def evaluation_file(self, asset: str, policy: Policy) -> Path:
        """``<asset>/<policy stem>.parquet``: a policy's predictions, backtests, equity curves, trades, ..."""
        return self.shard(asset, policy.stem)

    def benchmark_file(self, asset: str, fold: str | None = None) -> Path:
        """``<asset>/buy_and_hold.parquet`` (a fold's: ``buy_and_hold_fold2019.parquet``): the Buy & Hold rows,
        written once per fold (every policy of the fold writes the same)."""
        return self.shard(asset, "buy_and_hold" if fold is None else f"buy_and_hold_fold{fold}")

    def predictions_extra(self, folder: str, policy: Policy) -> Path:
        """``predictions/<folder>/<stem>.parquet``: the validation-day predictions (``validation``), the
        shards a prediction read (``inputs``), the model files' hashes (``model``), the calibration fitted on the
        validation days (``calibration``) and the universe predictions at the report's tau, calibrated
        (``universe``) and raw (``universe_raw``); subfolders, so not part of the ``predictions`` view."""
        return self.predictions_folder(folder) / f"{policy.stem}.parquet"

    def predictions_folder(self, folder: str) -> Path:
        return self.root / "predictions" / folder

    # --- reports --------------------------------------------------------------------------------------

    @property
    def reports_dir(self) -> Path:
        return self.root / REPORTS_DIR

    @property
    def report_tables_dir(self) -> Path:
        return self.reports_dir / "tables"

    @property
    def figures_dir(self) -> Path:
        return self.reports_dir / "figures"

    @property
    def tables_file(self) -> Path:
        return self.reports_dir / TABLES_FILE

    @property
    def report_file(self) -> Path:
        return self.reports_dir / REPORT_FILE

    # --- the catalog --------------------------------------------------------------------------------------

    def refresh_view(self, view: str, schema: dict[str, pl.DataType], folder: Path | None = None) -> None:
        """(Re)create ``view`` over the ``*.parquet`` of ``folder`` (default: the asset folder named ``view``)."""
        refresh_view(self.root, view, self.root / view if folder is None else folder, schema)

    def refresh_manifest_view(self, asset: str, schema: dict[str, pl.DataType]) -> None:
        self.refresh_view(f"{asset}_manifest", schema, self.root / "manifests" / asset)

    def query(self, sql: str, params: list | None = None) -> pl.DataFrame:
        """A read-only query of the catalog (``?`` placeholders bound to ``params``) as a Polars frame."""
        return query(self.root, sql, params)

    def read_view(self, view: str) -> pl.DataFrame:
        """Every row of a catalog view (an asset's shards, as DuckDB reads them)."""
        return self.query(f'SELECT * FROM "{view}"')


def _days_in(folder: Path, after: dt.date | None, until: dt.date | None) -> list[dt.date]:
    if not folder.is_dir():
        return []
    days = (dt.date.fromisoformat(p.stem) for p in folder.glob("*.parquet") if is_day_name(p.stem))
    return sorted(d for d in days if (after is None or d > after) and (until is None or d <= until))


def _unit_days_in(folder: Path, after: dt.date | None, until: dt.date | None) -> list[dt.date]:
    if not folder.is_dir():
        return []
    days = (dt.date.fromisoformat(p.name) for p in folder.iterdir() if is_day_name(p.name) and p.is_dir())
    return sorted(d for d in days if (after is None or d > after) and (until is None or d <= until))


def is_day_name(stem: str) -> bool:
    return len(stem) == 10 and stem[4] == "-" and stem[7] == "-" and stem.replace("-", "").isdigit()
