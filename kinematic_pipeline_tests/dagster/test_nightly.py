"""The nightly schedule, the evaluation schedule and the drop-directory sensor, run in process on the
embedded synthetic universe: each tick adds exactly one shard per token asset, touches nothing older,
and re-running it changes nothing."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from zoneinfo import ZoneInfo

import dagster as dg
import polars as pl
import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline.model_pins import pin_foundation
from kinematic_pipeline.nightly import consecutive_blocks, plan_sessions
from kinematic_pipeline.orchestration.partitions import RANGE_END, RANGE_START, policy_partitions
from kinematic_pipeline.orchestration.schedules import (
    NIGHTLY_QUEUE,
    QUEUE_TAG,
    build_schedules,
    evaluation_assets,
    nightly_evaluate_schedule,
)
from kinematic_pipeline.orchestration.sensors import drop_directory_sensor
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.conftest import execute_run_requests

TOKEN_ASSETS = ("spline_tokens", "fd_tokens", "raw_tokens")  # the three tokenizations' assets

NEW_YORK = ZoneInfo("America/New_York")
HISTORY = ("2021-01-04", "2021-03-31")  # what exists before the first tick (61 sessions)
TICKS = [dt.date(2021, 4, 1), dt.date(2021, 4, 5), dt.date(2021, 4, 6)]  # consecutive: 2 April is Good Friday
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _ci_environment(monkeypatch, warehouse: Path, **overrides: str):
    """The ci profile through the environment, so the definitions and the runs' resource agree."""
    for var in ("KP_SOURCE", "KP_SOURCE_PATH", "KP_START_DATE", "KP_DROP_DIR"):
        monkeypatch.delenv(var, raising=False)
    for var, value in {
        "KP_PROFILE": "ci",
        "KP_WAREHOUSE": str(warehouse),
        "KP_END_DATE": "2021-04-30",
        **overrides,
    }.items():
        monkeypatch.setenv(var, value)
    return load_settings()


@pytest.fixture
def nightly_settings(tmp_path, monkeypatch):
    return _ci_environment(monkeypatch, tmp_path / "warehouse")


def _at_18(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, 18, 0, tzinfo=NEW_YORK)


def _tick(defs: dg.Definitions, schedule: dg.ScheduleDefinition, day: dt.date):
    context = dg.build_schedule_context(scheduled_execution_time=_at_18(day), repository_def=defs.get_repository_def())
    return schedule.evaluate_tick(context)


def _snapshot(warehouse: Path) -> dict[str, tuple[int, str]]:
    """Every Parquet file (shards and manifests): (mtime_ns, sha256)."""
    return {str(p.relative_to(warehouse)): (p.stat().st_mtime_ns, file_sha256(p)) for p in warehouse.rglob("*.parquet")}


@pytest.mark.slow  # ~30 s: the nightly lane (the fast lane's 8 minutes are spent)
def test_three_nightly_ticks_add_one_shard_per_asset_and_a_rerun_changes_nothing(nightly_settings):
    settings, wh = nightly_settings, nightly_settings.warehouse.root
    defs = build_definitions(settings)
    schedule = defs.get_repository_def().get_schedule_def("nightly_tick")
    instance = dg.DagsterInstance.ephemeral()
    history = {"dagster/asset_partition_range_start": HISTORY[0], "dagster/asset_partition_range_end": HISTORY[1]}
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=["raw_ohlcv", *TOKEN_ASSETS, "labels"],
        tags=history,
        resources=defs.resources,
        instance=instance,
        run_config=QUIET,
    )
    assert result.success

    for previous, day in zip([dt.date(2021, 3, 31), *TICKS], TICKS):
        before = _snapshot(wh)
        tick = _tick(defs, schedule, day)
        assert tick.skip_message is None
        assert [
            (r.partition_key, sorted(k.to_user_string() for k in r.asset_selection)) for r in tick.run_requests
        ] == [
            (day.isoformat(), sorted(["raw_ohlcv", *TOKEN_ASSETS])),
            (previous.isoformat(), ["labels"]),
        ]
        assert all(r.tags[QUEUE_TAG] == NIGHTLY_QUEUE for r in tick.run_requests)
        assert all(r.success for r in execute_run_requests(defs, tick.run_requests, instance, run_config=QUIET))
        after = _snapshot(wh)

        new = set(after) - set(before)
        changed = {f for f in before if after[f] != before[f]}
        for asset in TOKEN_ASSETS:  # the day's unit: tokens and manifest
            unit = Warehouse(wh).unit_dir(asset, day).relative_to(wh)
            assert {f for f in new if f.startswith(f"{asset}/")} == {
                f"{unit}/tokens.parquet",
                f"{unit}/manifest.parquet",
            }
        unit = Warehouse(wh).unit_dir("raw_ohlcv", day).relative_to(wh)  # the day's unit: bars and manifest
        assert {f for f in new if f.startswith("raw_ohlcv/")} == {f"{unit}/bars.parquet", f"{unit}/manifest.parquet"}
        # The only older files rewritten: the previous session's labels (and its manifest), now with returns.
        unit = Warehouse(wh).unit_dir("labels", previous).relative_to(wh)
        labels = {f"{unit}/labels.parquet", f"{unit}/manifest.parquet"}
        assert changed <= labels and labels <= changed | new
        assert not Warehouse(wh).shard("labels", day).exists()  # the new day's labels wait for the next session
        known = pl.read_parquet(Warehouse(wh).shard("labels", previous))["label_tau_0p0100"]
        assert known.len() > 0 and (known >= 0).all()
        assert all(
            any(part.removesuffix(".parquet") in (str(day), str(previous)) for part in f.split("/"))
            for f in new | changed
        )

        again = _tick(defs, schedule, day)
        assert [r.run_key for r in again.run_requests] == [r.run_key for r in tick.run_requests]  # no duplicates
        assert all(r.success for r in execute_run_requests(defs, again.run_requests, instance, run_config=QUIET))
        assert _snapshot(wh) == after  # byte-identical, mtimes too


def test_a_day_the_nyse_is_closed_gives_a_skip_reason_and_no_run(nightly_settings):
    defs = build_definitions(nightly_settings)
    schedule = defs.get_repository_def().get_schedule_def("nightly_tick")
    for holiday in (dt.date(2021, 4, 2), dt.date(2021, 1, 18)):  # Good Friday, Martin Luther King Jr. Day
        tick = _tick(defs, schedule, holiday)
        assert not tick.run_requests and "not an NYSE session" in tick.skip_message
    late = _tick(defs, schedule, dt.date(2021, 5, 3))  # after KP_END_DATE
    assert not late.run_requests and "last day" in late.skip_message


def test_the_evaluation_schedule_asks_for_each_fine_tuned_model_only(nightly_settings):
    settings = nightly_settings
    partitions = policy_partitions(settings)
    stubs = [dg.asset(name=name, partitions_def=partitions)(lambda: None) for name in evaluation_assets(settings)]
    assert [s.name for s in build_schedules(settings, [])] == ["nightly_tick"]  # no evaluate stage: no schedule
    schedule = nightly_evaluate_schedule(settings)
    defs = dg.Definitions(assets=stubs, schedules=[schedule])

    assert "no fine-tuned model" in _tick(defs, schedule, TICKS[0]).skip_message
    wh, (first, second) = settings.warehouse, settings.train.seeds
    fold, earlier = settings.folds[-1], settings.folds[0]  # the last fold's test period is the one a night extends
    assert (fold.name, earlier.name) == ("2022H2", "2022H1")
    spline, patch = (
        Policy("splinegpt", BuySellHold(0.01), second, fold),
        Policy("patchtst", BuySellHold(0.02), first, fold),
    )
    (wh.adapter_dir(spline) / "adapter").mkdir(parents=True)
    (wh.adapter_dir(spline) / "adapter/adapter_config.json").write_text("{}")
    wh.adapter_dir(patch).mkdir(parents=True)
    (wh.adapter_dir(patch) / "head.pt").write_bytes(b"")
    wh.adapter_dir(Policy("rawgpt", BuySellHold(0.005), first, fold)).mkdir(
        parents=True
    )  # a folder without a model: not ready
    wh.adapter_dir(Policy("rawgpt", BuySellHold(0.005), first, earlier)).mkdir(
        parents=True
    )  # an earlier fold's: not nightly
    (wh.adapter_dir(Policy("rawgpt", BuySellHold(0.005), first, earlier)) / "head.pt").write_bytes(b"")
    fd = wh.adapter_dir(Policy("rawgpt_fd", BuySellHold(0.01), first, fold))
    fd.mkdir(parents=True)
    (fd / "head.pt").write_bytes(b"")  # a LoRA variant's is adapter/
    retrained = Policy(
        "rawgpt", BuySellHold(0.01), second, fold
    )  # fine-tuned from a foundation retrained since: never asked
    (wh.adapter_dir(retrained) / "adapter").mkdir(parents=True)
    (wh.adapter_dir(retrained) / "adapter/adapter_config.json").write_text("{}")
    for policy in (spline, patch, retrained):  # each adapter pins the foundation it was fine-tuned from
        wh.foundation_checkpoint(policy).parent.mkdir(parents=True, exist_ok=True)
        wh.foundation_checkpoint(policy).write_bytes(b"weights")
        checkpoint = wh.foundation_checkpoint(policy)
        pin_foundation(wh, wh.adapter_dir(policy), checkpoint, file_sha256(checkpoint), policy.task.record)
    wh.foundation_checkpoint(retrained).write_bytes(b"retrained weights")
    tick = _tick(defs, schedule, TICKS[0])
    assert sorted(r.partition_key for r in tick.run_requests) == [
        f"{fold.name}@{first}|0.02",
        f"{fold.name}@{second}|0.01",
    ]
    selections = {r.partition_key: sorted(k.path[0] for k in r.asset_selection) for r in tick.run_requests}
    assert selections == {
        f"{fold.name}@{first}|0.02": ["patchtst_backtests", "patchtst_margin_backtests", "patchtst_predictions"],
        f"{fold.name}@{second}|0.01": ["splinegpt_backtests", "splinegpt_margin_backtests", "splinegpt_predictions"],
    }
    assert not _tick(defs, schedule, dt.date(2021, 4, 2)).run_requests  # Good Friday


def test_consecutive_sessions_across_a_holiday_form_one_block():
    days = [dt.date(2021, 4, 1), dt.date(2021, 4, 5), dt.date(2021, 4, 7), dt.date(2021, 4, 8)]
    assert consecutive_blocks(days) == [days[:2], days[2:]]


def _write_csv(frame: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")  # how a producer should drop a file: write, then rename
    frame.select("ticker", "date", "open", "high", "low", "close", "volume").write_csv(tmp)
    tmp.rename(path)


@pytest.mark.slow  # ~30 s: the nightly lane (the fast lane's 8 minutes are spent)
def test_the_drop_directory_sensor_ingests_and_tokenizes_the_days_of_new_files(tmp_path, monkeypatch):
    from kinematic_pipeline.sources.synthetic import SyntheticSource

    drop = tmp_path / "drop"
    drop.mkdir()
    elsewhere = tmp_path / "elsewhere.csv"  # KP_SOURCE_PATH: the sensor's runs read the drop directory instead
    elsewhere.write_text("ticker,date,open,high,low,close,volume\n")
    settings = _ci_environment(
        monkeypatch, tmp_path / "warehouse", KP_SOURCE="csv", KP_SOURCE_PATH=str(elsewhere), KP_DROP_DIR=str(drop)
    )
    bars = SyntheticSource(settings.synthetic, settings.data.start_date, dt.date(2021, 4, 30)).read(
        dt.date(2021, 1, 4), dt.date(2021, 4, 30)
    )
    defs = build_definitions(settings)
    sensor = defs.get_repository_def().get_sensor_def("drop_directory")
    instance = dg.DagsterInstance.ephemeral()

    def evaluate(cursor):
        context = dg.build_sensor_context(cursor=cursor, repository_def=defs.get_repository_def())
        return sensor.evaluate_tick(context)

    _write_csv(bars.filter(pl.col("date") <= dt.date(2021, 3, 31)), drop / "history.csv")
    first = evaluate(None)
    assert [(r.partition_key, r.tags.get(RANGE_END)) for r in first.run_requests] == [
        (None, "2021-03-31"),  # raw_ohlcv + tokens: one single-run range over the history
        (None, "2021-03-30"),  # labels of every session whose next session is in the file
    ]
    assert all(r.success for r in execute_run_requests(defs, first.run_requests, instance, run_config=QUIET))
    assert evaluate(first.cursor).skip_message.startswith("no new *.csv file")

    # A new drop: Thursday 1 April and Monday 5 April (Good Friday between: one block of sessions).
    _write_csv(bars.filter(pl.col("date").is_in([dt.date(2021, 4, 1), dt.date(2021, 4, 5)])), drop / "april.csv")
    second = evaluate(first.cursor)
    assert json.loads(second.cursor).keys() == {"history.csv", "april.csv"}
    spans = [(r.tags.get(RANGE_START), r.tags.get(RANGE_END)) for r in second.run_requests]
    assert spans == [("2021-04-01", "2021-04-05"), ("2021-03-31", "2021-04-01")]
    assert all(r.success for r in execute_run_requests(defs, second.run_requests, instance, run_config=QUIET))
    for asset in ("raw_ohlcv", *TOKEN_ASSETS):
        assert pl.read_parquet(settings.warehouse.shard(asset, "2021-04-05")).height > 0
    assert (pl.read_parquet(settings.warehouse.shard("labels", "2021-03-31"))["label_tau_0p0100"] >= 0).all()


def test_the_drop_directory_sensor_is_idle_for_other_sources(nightly_settings):
    sensor = drop_directory_sensor(nightly_settings)  # synthetic
    defs = dg.Definitions(sensors=[sensor])
    result = sensor.evaluate_tick(dg.build_sensor_context(repository_def=defs.get_repository_def()))
    assert not result.run_requests and "parquet and csv sources only" in result.skip_message


def test_plans_give_labels_only_to_sessions_inside_the_history(ci_settings):
    first = plan_sessions(ci_settings, [dt.date(2021, 3, 1), dt.date(2021, 3, 2)])
    assert first[0].label_sessions == (dt.date(2021, 3, 1),)  # 26 February is before the history


def test_the_nightly_planner_is_pure():
    code = "import sys, kinematic_pipeline.nightly\nprint('dagster' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
