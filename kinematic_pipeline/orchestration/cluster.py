"""More than one process: Postgres-backed instance storage and the Celery executor, with clear errors.

Thin wrappers around dagster-postgres's storages and dagster-celery's ``celery_executor`` (the ``cluster``
extra: ``pip install -e '.[cluster]'``), used by ``deploy/postgres/dagster.yaml`` and
``deploy/celery/code_location.py`` (the event log also writes event batches in one transaction, as the default
SQLite one does). They add a check before connecting: a Postgres server or Redis
broker that does not answer gives an error naming its host and port and ``scripts/servers.sh``, instead of a
driver's traceback (or, for Celery, a run that waits on a broker forever); a missing library names the extra.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import dagster as dg
import sqlalchemy as db

EXTRA_HINT = "pip install -e '.[cluster]' (or: pip install -c constraints.txt dagster-postgres dagster-celery[redis])"
SERVERS_HINT = 'start it with `scripts/servers.sh start` (then `eval "$(scripts/servers.sh url)"`)'


class ServerUnreachable(dg.DagsterError):
    """A server the instance or the executor needs does not accept connections."""


def check_reachable(url: str, what: str, default_port: int, timeout: float = 3.0) -> None:
    """Open (and close) a TCP connection to the host and port of ``url``; raise ServerUnreachable if refused."""
    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or default_port
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        raise ServerUnreachable(f"{what} at {host}:{port} is not reachable ({exc}); {SERVERS_HINT}") from exc


def _missing(library: str, exc: ImportError) -> ImportError:
    return ImportError(f"{library} is not installed ({exc}); install the cluster extra: {EXTRA_HINT}")


try:
    import dagster_postgres
    from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
except ImportError as _pg_error:  # the module still imports; using a storage names the extra
    _PG_ERROR: ImportError | None = _pg_error
else:
    _PG_ERROR = None

    def _checked(base):
        class Checked(base):
            """dagster-postgres's storage, after checking that the server answers."""

            @classmethod
            def from_config_value(cls, inst_data, config_value):
                check_reachable(pg_url_from_config(config_value), "PostgreSQL (Dagster instance storage)", 5432)
                return base.from_config_value(inst_data, config_value)

        Checked.__name__ = Checked.__qualname__ = base.__name__
        return Checked

    PostgresRunStorage = _checked(dagster_postgres.PostgresRunStorage)

    from kinematic_pipeline.orchestration.event_log import BatchedWrites

    class PostgresEventLogStorage(BatchedWrites, dagster_postgres.PostgresEventLogStorage):
        """dagster-postgres's event log, after checking that the server answers, writing a batch of events
        (a backfill's planned events: one per partition) in one transaction (orchestration/event_log.py)."""

        @classmethod
        def from_config_value(cls, inst_data, config_value):
            url = pg_url_from_config(config_value)
            check_reachable(url, "PostgreSQL (Dagster instance storage)", 5432)
            return cls(  # dagster-postgres's own from_config_value builds its base class, not cls
                inst_data=inst_data,
                postgres_url=url,
                should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                token_provider=get_token_provider_from_config(config_value),
            )

        def initialize_concurrency_limit_to_default(self, concurrency_key: str) -> bool:
            """A pool's first claim under ``concurrency.pools.default_limit`` (the training pool of the grid).

            Dagster 1.13.27 inserts the pool's row, catches the duplicate key and updates it in the same
            transaction, which Postgres has already aborted (dagster-io/dagster#33552): two runs claiming a pool
            for the first time at once (the grid's runs), or a changed default_limit, fail the run. Here the
            same row in one ``INSERT ... ON CONFLICT DO UPDATE``; a concurrent first claim waits on the row,
            then sees its slots, so it never adds a second set."""
            if (
                not self.has_concurrency_limits_table
                or not self.has_default_pool_limit_col
                or not self.has_instance
                or self._instance.global_op_concurrency_default_limit is None
            ):
                return super().initialize_concurrency_limit_to_default(concurrency_key)
            from dagster._core.storage.event_log.schema import ConcurrencyLimitsTable
            from sqlalchemy.dialects.postgresql import insert

            self._reconcile_concurrency_limits_from_slots()
            limit = self._instance.global_op_concurrency_default_limit
            table = ConcurrencyLimitsTable
            with self.index_transaction() as conn:
                conn.execute(
                    insert(table)
                    .values(concurrency_key=concurrency_key, limit=limit, using_default_limit=True)
                    .on_conflict_do_update(
                        index_elements=[table.c.concurrency_key],
                        set_={"limit": limit},
                        where=table.c.limit != limit,
                    )
                )
                conn.execute(table.select().where(table.c.concurrency_key == concurrency_key).with_for_update())
                self._allocate_concurrency_slots(conn, concurrency_key, limit)
            return True

        def _claim_concurrency_slot(self, concurrency_key: str, run_id: str, step_key: str):
            """Take a free slot of the pool for a step, in one transaction.

            Dagster 1.13.27 selects a free slot ``FOR UPDATE SKIP LOCKED`` and then writes the step into it,
            both on dagster-postgres's autocommit connection: the row lock ends with the select, so two steps
            assigned at once could both take the one slot (seen: two adapter steps of the training pool, started
            0.03 s apart, ran together). Here the lock holds until the write, a concurrent claim skips the
            locked slot, and the write takes the slot only while it is still free."""
            from dagster._core.storage.event_log.schema import ConcurrencySlotsTable as slots
            from dagster._utils.concurrency import ConcurrencySlotStatus

            free = db.and_(slots.c.concurrency_key == concurrency_key, slots.c.step_key.is_(None), ~slots.c.deleted)
            with self.index_transaction() as conn:
                row = conn.execute(
                    db.select(slots.c.id).where(free).with_for_update(skip_locked=True).limit(1)
                ).fetchone()
                if row is None:
                    return ConcurrencySlotStatus.BLOCKED
                taken = conn.execute(
                    slots.update().values(run_id=run_id, step_key=step_key).where(slots.c.id == row[0], free)
                ).rowcount
            return ConcurrencySlotStatus.CLAIMED if taken else ConcurrencySlotStatus.BLOCKED

    PostgresScheduleStorage = _checked(dagster_postgres.PostgresScheduleStorage)


def __getattr__(name: str):
    if name.startswith("Postgres") and _PG_ERROR is not None:
        raise _missing("dagster-postgres", _PG_ERROR)
    if name == "celery_executor":
        return _make_celery_executor()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_celery_executor() -> dg.ExecutorDefinition:
    """dagster-celery's ``celery_executor`` (same name and config schema) that first checks the broker."""
    try:
        from dagster_celery import celery_executor as upstream
        from dagster_celery.defaults import broker_url as default_broker
    except ImportError as exc:
        raise _missing("dagster-celery", exc) from exc

    @dg.executor(
        name=upstream.name,
        config_schema=upstream.config_schema,
        requirements=dg.multiple_process_executor_requirements(),
    )
    def celery_executor(init_context):
        config = init_context.executor_config
        broker = config.get("broker") or default_broker
        check_reachable(broker, "the Celery broker", 6379 if broker.startswith("redis") else 5672)
        backend = config.get("backend") or ""
        if backend.startswith("redis"):
            check_reachable(backend, "the Celery result backend", 6379)
        return upstream.executor_creation_fn(init_context)

    celery_executor.__doc__ = upstream.__doc__
    return celery_executor
