"""Event logs with batched writes: Dagster's consolidated SQLite storage (the default instance) and, through
:class:`BatchedWrites`, dagster-postgres's (``orchestration/cluster.py``).

A single-run backfill over 5,787 trading days stores one planned and one materialization event per
partition. Dagster's SQLite storage builds a new SQLAlchemy engine and commits (one WAL fsync) for
every statement group of every event, and stores a partitioned check's planned evaluation by
serializing the same event once per partition: ~20 ms per event on the 23-year ``raw_ohlcv`` backfill
(``benchmarks/bench_backfill_bookkeeping.py``). These classes change how the rows are written, not which
rows are written, so the UI's per-partition status is the same:

* one engine per process (not per statement);
* ``PRAGMA synchronous=NORMAL`` in WAL mode: a commit survives a crash of the process; a power cut
  may lose the last commits but never corrupts the database (https://sqlite.org/wal.html);
* ``store_event_batch`` (Dagster calls it when ``DAGSTER_EVENT_BATCH_SIZE`` > 0, which
  :mod:`kinematic_pipeline.definitions` sets by default) stores the batch in one transaction; a batch of
  materializations updates each asset's latest-event row once (as dagster-postgres does); if any
  event fails, the transaction rolls back and Dagster stores the events one by one;
* whether a table exists is asked once, not before every event;
* a planned check evaluation is serialized once, not once per partition row.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import sqlalchemy as db
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log import ConsolidatedSqliteEventLogStorage
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlalchemy_compat import db_result
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import serialize_value
from sqlalchemy.pool import NullPool

ASSET_EVENT_TYPES = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION}


def _pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class BatchedWrites:
    """Mixin for a SQL event log storage (before it in the bases): a batch of events in one transaction.

    ``_open_connection`` is the storage's own connection (a new one per call); while a batch is stored,
    every ``_connect`` of this thread gets the batch's connection instead, inside one transaction.
    """

    def _batch_state(self) -> threading.local:
        if "_kp_batch" not in self.__dict__:
            self.__dict__["_kp_batch"] = threading.local()
        return self.__dict__["_kp_batch"]

    def _open_connection(self):
        return super()._connect()

    @contextmanager
    def _connect(self) -> Iterator[db.engine.Connection]:
        shared = getattr(self._batch_state(), "conn", None)
        if shared is not None:  # inside store_event_batch: the batch's transaction
            yield shared
            return
        with self._open_connection() as conn:
            yield conn

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        state = self._batch_state()
        if getattr(state, "conn", None) is not None:
            super().store_event_batch(events)
            return
        types = {event.get_dagster_event().event_type for event in events}
        with self._open_connection() as conn:
            if not conn.in_transaction():  # Postgres: its connections autocommit
                conn = conn.execution_options(isolation_level="READ COMMITTED")
            with nullcontext() if conn.in_transaction() else conn.begin():
                state.conn = conn
                try:
                    if len(types) == 1 and types <= ASSET_EVENT_TYPES:
                        self._store_asset_events(conn, events)
                    else:
                        for event in events:
                            self.store_event(event)
                finally:
                    state.conn = None

    def _store_asset_events(self, conn: db.engine.Connection, events: Sequence[EventLogEntry]) -> None:
        """What ``store_event`` does for each, except that each asset's row in the asset table is
        updated once, with its last event (as dagster-postgres' ``store_event_batch`` does)."""
        ids = []
        for event in events:
            with db_result(conn, self.prepare_insert_event(event)) as result:
                ids.append(result.inserted_primary_key[0])
        self._store_asset_event_tags(conn, events, ids)
        last = {event.get_dagster_event().asset_key: (event, event_id) for event, event_id in zip(events, ids)}
        for event, event_id in last.values():
            self._store_asset_event(conn, event, event_id)

    def has_table(self, table_name: str) -> bool:
        """Cached once true (Dagster asks before every asset event's tags, opening a connection each time)."""
        seen = self.__dict__.setdefault("_kp_tables_seen", set())
        if table_name not in seen and super().has_table(table_name):
            seen.add(table_name)
        return table_name in seen

    def _store_asset_check_evaluation_planned(self, event: EventLogEntry, event_id: int | None) -> None:
        planned = event.get_dagster_event().event_specific_data
        keys = planned.partitions_subset.get_partition_keys() if planned.partitions_subset else [None]
        serialized = serialize_value(event)  # once, not once per partition row
        timestamp = self._event_insert_timestamp(event)
        rows = [
            dict(
                asset_key=planned.asset_key.to_string(),
                check_name=planned.check_name,
                partition=key,
                run_id=event.run_id,
                execution_status=AssetCheckExecutionRecordStatus.PLANNED.value,
                evaluation_event=serialized,
                evaluation_event_timestamp=timestamp,
                evaluation_event_storage_id=event_id,
            )
            for key in keys
        ]
        with self.index_connection() as conn:
            conn.execute(AssetCheckExecutionsTable.insert(), rows)


class BatchedSqliteEventLogStorage(BatchedWrites, ConsolidatedSqliteEventLogStorage):
    """:class:`ConsolidatedSqliteEventLogStorage` that writes a batch of events in one transaction.

    A relative ``base_dir`` is a folder of the instance's own home (``instance.root_directory``: the folder whose
    ``dagster.yaml`` was read), never of the working directory nor of whatever ``$DAGSTER_HOME`` the opening process
    has: ``DagsterInstance.from_config(other_home)`` reads ``other_home``'s runs *and* events. The database is opened
    when the instance registers the storage (Dagster sets the instance's artifact storage, its root, first).
    """

    def __init__(self, base_dir, inst_data=None):
        self._engine_pid: int | None = None
        self._engine: db.engine.Engine | None = None
        self._relative_base_dir = None if os.path.isabs(base_dir) else base_dir
        if self._relative_base_dir is None:
            super().__init__(base_dir, inst_data=inst_data)
        else:
            self._inst_data = inst_data  # the database is opened in register_instance, under the instance's home

    def register_instance(self, instance) -> None:
        if self._relative_base_dir is not None and not hasattr(self, "_conn_string"):
            home = os.path.abspath(instance.root_directory)
            super().__init__(os.path.join(home, self._relative_base_dir), inst_data=self._inst_data)
        super().register_instance(instance)

    def _get_engine(self) -> db.engine.Engine:
        if self._engine is None or self._engine_pid != os.getpid():  # a forked child opens its own
            engine = create_engine(
                self._conn_string, poolclass=NullPool, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
            )
            db.event.listen(engine, "connect", _pragmas)
            self._engine, self._engine_pid = engine, os.getpid()
        return self._engine

    @contextmanager
    def _open_connection(self) -> Iterator[db.engine.Connection]:
        with self._get_engine().connect() as conn, conn.begin():
            yield conn
