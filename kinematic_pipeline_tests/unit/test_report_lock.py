"""One writer of the report group at a time: while another process holds the warehouse's report-group lock (a
second ``materialize`` of another KP_SEEDS, here a child process), a report-group asset waits, saying for whom, and
starts only once it is released, so a product and its pin are never written by one run while another reads them."""

from __future__ import annotations

import multiprocessing
import threading
import time

from kinematic_pipeline.stages import report_summaries
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.day_units import day_lock


def _hold(root: str, held, release) -> None:
    with day_lock(Warehouse(root), *report_summaries.REPORT_LOCK):
        held.set()
        release.wait(30)


def test_a_report_group_asset_waits_for_the_run_that_holds_the_report_lock(tmp_path, monkeypatch, capfd):
    settings = type("S", (), {"warehouse": Warehouse(tmp_path / "warehouse")})()
    entered: list[float] = []
    monkeypatch.setattr(report_summaries, "materialize_pooled_backtests", lambda s: entered.append(time.time()) or {})
    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold, args=(str(settings.warehouse.root), held, release))
    other.start()
    try:
        assert held.wait(60)
        worker = threading.Thread(target=report_summaries.pooled_backtests, args=(settings,))
        worker.start()
        time.sleep(1.0)
        assert entered == []  # still waiting for the other run
        released = time.time()
        release.set()
        worker.join(30)
        assert not worker.is_alive() and len(entered) == 1 and entered[0] >= released
    finally:
        release.set()
        other.join(30)
    assert f"reports report-group is being written by pid {other.pid}" in capfd.readouterr().err
