"""The default instance's batched SQLite event log stores what Dagster's own SQLite storage stores.

The same single-run backfills (one that succeeds with a partitioned check, one that fails) go through an
instance with Dagster's ConsolidatedSqliteEventLogStorage and one with ours: the rows of every table
(event types and partitions, event tags, the asset's latest event, planned check evaluations) are the same,
and so is what the UI asks: materialized, failed and in-progress partitions, and the latest materialization.
"""

import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

from kinematic_pipeline.orchestration.event_log import BatchedSqliteEventLogStorage
from kinematic_pipeline_tests.helpers import ROOT

PARTITIONS = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-03-01")
STOCK = "module: dagster._core.storage.event_log\n  class: ConsolidatedSqliteEventLogStorage"
OURS = "module: kinematic_pipeline.orchestration.event_log\n  class: BatchedSqliteEventLogStorage"


@dg.asset(partitions_def=PARTITIONS, backfill_policy=dg.BackfillPolicy.single_run(), code_version="1")
def daily(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    if context.run.tags.get("fail") == "yes":
        raise RuntimeError("planned failure")
    return dg.MaterializeResult(metadata={"days": len(context.partition_keys)})


@dg.asset_check(asset=daily, blocking=True)
def daily_ok() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


def _instance(home: Path, storage: str) -> dg.DagsterInstance:
    home.mkdir()
    (home / "dagster.yaml").write_text(
        f"event_log_storage:\n  {storage}\n  config:\n    base_dir: {home}/events\n"
        f"run_storage:\n  module: dagster._core.storage.runs\n  class: SqliteRunStorage\n"
        f"  config:\n    base_dir: {home}/runs\ntelemetry:\n  enabled: false\n"
    )
    return dg.DagsterInstance.from_config(str(home))


def _backfill(instance: dg.DagsterInstance, first: str, last: str, fail: bool = False) -> None:
    tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    if fail:
        tags["fail"] = "yes"
    dg.materialize([daily, daily_ok], instance=instance, tags=tags, raise_on_error=False)


def _rows(home: Path) -> dict[str, Counter]:
    con = sqlite3.connect(home / "events" / "event_log.db")
    queries = {
        "events": "SELECT dagster_event_type, asset_key, partition FROM event_logs",
        "tags": "SELECT asset_key, key, value FROM asset_event_tags",
        "checks": "SELECT asset_key, check_name, partition, execution_status FROM asset_check_executions",
        "asset_keys": "SELECT asset_key FROM asset_keys",
    }
    out = {name: Counter(con.execute(sql).fetchall()) for name, sql in queries.items()}
    con.close()
    return out


@pytest.fixture
def batching(monkeypatch):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "10000")


def test_batched_storage_stores_the_same_rows_as_dagsters(tmp_path, batching):
    state = {}
    for name, storage in (("stock", STOCK), ("ours", OURS)):
        with _instance(tmp_path / name, storage) as instance:
            if name == "ours":
                assert isinstance(instance.event_log_storage, BatchedSqliteEventLogStorage)
            _backfill(instance, "2024-01-01", "2024-01-20")
            _backfill(instance, "2024-01-15", "2024-02-10", fail=True)
            key = dg.AssetKey("daily")
            latest = instance.get_latest_materialization_event(key)
            status = get_and_update_asset_status_cache_value(instance, key, PARTITIONS)
            state[name] = {
                "materialized": sorted(instance.get_materialized_partitions(key)),
                "failed": sorted(status.deserialize_failed_partition_subsets(PARTITIONS).get_partition_keys()),
                "in_progress": list(status.deserialize_in_progress_partition_subsets(PARTITIONS).get_partition_keys()),
                "latest": (latest.dagster_event.partition, latest.asset_materialization.metadata["days"].value),
                "rows": _rows(tmp_path / name),
            }
    stock, ours = state["stock"], state["ours"]
    assert ours["materialized"] == stock["materialized"]
    assert len(ours["materialized"]) == 20  # the failed run materialized nothing
    # what the UI shows per partition: every partition of the failed run (its latest) is failed
    assert ours["failed"] == stock["failed"]
    assert ours["failed"] == [f"2024-01-{d}" for d in range(15, 32)] + [f"2024-02-{d:02d}" for d in range(1, 11)]
    assert ours["in_progress"] == stock["in_progress"] == []
    assert ours["latest"] == stock["latest"] == ("2024-01-20", 20)
    for table in stock["rows"]:
        assert ours["rows"][table] == stock["rows"][table], table
    count = Counter()
    for (kind, _, _), n in ours["rows"]["events"].items():
        count[kind] += n
    assert count["ASSET_MATERIALIZATION_PLANNED"] == 20 + 27  # one per partition of both runs
    assert count["ASSET_MATERIALIZATION"] == 20


def test_a_batch_is_one_transaction_and_falls_back_to_single_writes(tmp_path, batching, monkeypatch):
    """A batch that fails half-way leaves none of its rows: Dagster then stores its events one by one."""
    with _instance(tmp_path / "ours", OURS) as instance:
        storage = instance.event_log_storage
        calls = {"n": 0}
        original = storage._store_asset_event_tags

        def flaky(conn, events, ids):
            calls["n"] += 1
            if calls["n"] == 1 and len(events) > 1:
                raise RuntimeError("disk full")
            return original(conn, events, ids)

        monkeypatch.setattr(storage, "_store_asset_event_tags", flaky)
        _backfill(instance, "2024-01-01", "2024-01-10")
        rows = _rows(tmp_path / "ours")
        materializations = [p for (kind, _, p) in rows["events"].elements() if kind == "ASSET_MATERIALIZATION"]
        assert sorted(materializations) == [f"2024-01-{d:02d}" for d in range(1, 11)]  # once each, not twice
        assert calls["n"] > 1


def test_the_repository_instances_use_the_batched_storage():
    root = ROOT
    for config in (root / "dagster.yaml", root / "deploy" / "local" / "dagster.yaml"):
        text = config.read_text()
        assert "module: kinematic_pipeline.orchestration.event_log" in text, config
        assert "class: BatchedSqliteEventLogStorage" in text, config
    import kinematic_pipeline.definitions  # noqa: F401  (sets the batch size for the processes that run steps)

    assert int(os.environ["DAGSTER_EVENT_BATCH_SIZE"]) > 0


def test_a_relative_base_dir_is_the_opened_instances_own_whatever_dagster_home_says(tmp_path, monkeypatch):
    """``DagsterInstance.from_config(home)`` from a process whose ``$DAGSTER_HOME`` is another instance (a test, a
    tool reading a warehouse's instance) reads and writes ``home``'s event log, not the other one's."""
    ours, other = tmp_path / "ours", tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(other))
    ours.mkdir()
    shutil.copy(ROOT / "dagster.yaml", ours / "dagster.yaml")  # base_dir: history/event_log (relative)
    with dg.DagsterInstance.from_config(str(ours)) as instance:
        _backfill(instance, "2024-01-01", "2024-01-03")
        assert len(instance.fetch_materializations(daily.key, limit=10).records) == 3
    assert (ours / "history" / "event_log" / "event_log.db").exists()
    assert not (other / "history").exists()
    with dg.DagsterInstance.from_config(str(other)) as instance:  # the other home: its own, empty, event log
        assert instance.fetch_materializations(daily.key, limit=10).records == []
