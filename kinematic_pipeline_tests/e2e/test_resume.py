"""``materialize --resume`` through the real CLI: what the stopped command finished is not run again, the rest runs,
a second resume continues the first, and a resume with other settings is refused."""

from __future__ import annotations

import dagster as dg
import pytest

from kinematic_pipeline.orchestration.resume import RESUMES_TAG, SETTINGS_TAG
from kinematic_pipeline.orchestration.runs import INVOCATION_TAG
from kinematic_pipeline_tests.helpers.cli import run_cli

pytestmark = pytest.mark.e2e


def _runs(tmp_path) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        return list(instance.get_runs(ascending=True))


def _assets(run: dg.DagsterRun, tmp_path) -> set[str]:
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        events = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    return {e.dagster_event.asset_key.to_user_string() for e in events}


def test_a_resumed_materialize_runs_only_what_the_stopped_one_did_not_finish(tmp_path, monkeypatch):
    monkeypatch.delenv("KP_FOLDS", raising=False)
    blocker = tmp_path / "warehouse" / "alpha_estimates"  # a file where the stage's folder goes: its run fails
    blocker.parent.mkdir()
    blocker.write_text("in the way")
    first = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv,alpha_estimates")
    assert first.returncode == 1 and "FAILED: alpha_estimates" in first.stderr, first.stderr
    ingest, failed = _runs(tmp_path)
    assert (ingest.status, failed.status) == (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE)
    invocation = ingest.tags[INVOCATION_TAG]
    blocker.unlink()

    second = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv,alpha_estimates", "--resume")
    assert second.returncode == 0, second.stderr
    assert f"resume invocation {invocation}:" in second.stdout
    assert "resumed: 1 of 1 runs finished before, skipped" in second.stdout
    assert "materialized alpha_estimates" in second.stdout
    runs = _runs(tmp_path)
    assert len(runs) == 3, [r.run_id for r in runs]  # raw_ohlcv was not run again; the failed run was
    alpha = runs[2]
    assert _assets(alpha, tmp_path) == {"alpha_estimates"}
    assert alpha.tags[RESUMES_TAG] == invocation and alpha.tags[SETTINGS_TAG] == ingest.tags[SETTINGS_TAG]

    third = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv,alpha_estimates", "--resume")
    assert third.returncode == 0, third.stderr
    assert f"resume invocation {invocation}:" in third.stdout  # the first command's, through the second's runs
    assert third.stdout.count("runs finished before, skipped") == 2
    assert len(_runs(tmp_path)) == 3  # nothing left to run


def test_a_resume_with_other_settings_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("KP_FOLDS", raising=False)
    first = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv")
    assert first.returncode == 0, first.stderr
    monkeypatch.setenv("KP_PRETRAIN_STEPS", "7")  # a longer or shorter budget: other settings
    refused = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv,alpha_estimates", "--resume")
    assert refused.returncode == 1
    assert "ran with other settings or stage code" in refused.stderr
    assert len(_runs(tmp_path)) == 1


def test_resume_with_nothing_to_resume_says_so(tmp_path):
    proc = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv", "--resume")
    assert proc.returncode == 1
    assert "nothing to resume" in proc.stderr
