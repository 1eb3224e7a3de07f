"""Training side by side through the real CLI (issue 39), on copies of the ci warehouse the DAG lane materialized
(``KP_GOLDEN_WAREHOUSE``), each with a Dagster instance of its own:

``materialize --select splinegpt_foundation`` with ``KP_TRAIN_SIDE_BY_SIDE=2`` trains each seed's folds in a worker
process of its own (one torch thread each on 2 cores), the two seeds at once and each seed's folds in order (fold
2022H2 warm-starts from 2022H1); every run carries its worker's pid (an orphan is found as for any run) and the
command's invocation, which ``timings --invocation`` takes whole. The foundations are, tensor for tensor, those that
one-at-a-time training at one thread makes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import torch

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.orchestration.runs import INVOCATION_TAG, PID_TAG
from kinematic_pipeline.policy import Foundation
from kinematic_pipeline_tests.conftest import CI_FOLDS, golden_ci_settings

pytestmark = pytest.mark.e2e
BUDGET = {"KP_PRETRAIN_STEPS": "12", "KP_WARM_START_STEPS": "6", "KP_EVAL_EVERY": "6"}
FITS = [("2022H1", 1234), ("2022H1", 1235), ("2022H2", 1234), ("2022H2", 1235)]


def _copy(folder: Path) -> Path:
    """A copy of the ci warehouse (mtimes kept: the verified sidecars hold), with an empty Dagster instance."""
    root = Path(shutil.copytree(golden_ci_settings().warehouse.root, folder / "warehouse", symlinks=True))
    (folder / "home").mkdir()
    (folder / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return root


def _kp(copy: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KP_TRAIN_") and k != "KP_SEEDS"}
    env.update(KP_PROFILE="ci", KP_WAREHOUSE=str(copy), DAGSTER_HOME=str(copy.parent / "home"), **BUDGET, **extra)
    command = [sys.executable, "-m", "kinematic_pipeline", *args]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc


def class_weight_vector(copy: Path) -> dict[tuple[str, int], dict[str, torch.Tensor]]:
    wh = load_settings("ci", warehouse=copy, env={}).warehouse
    out = {}
    for fold, seed in FITS:
        path = wh.foundation_checkpoint(Foundation.named(CI_FOLDS, "splinegpt", seed, fold))
        out[fold, seed] = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    return out


def test_two_seeds_train_side_by_side_in_a_worker_each_and_make_the_one_thread_foundations(tmp_path):
    side = _copy(tmp_path / "side")
    proc = _kp(side, "materialize", "--select", "splinegpt_foundation", KP_TRAIN_SIDE_BY_SIDE="2")
    assert (
        "side by side: 2 chains (a model or tokenization, seed and tau each, folds in order), 2 at once" in proc.stdout
    ), proc.stdout

    with dg.DagsterInstance.from_config(str(side.parent / "home")) as instance:
        runs = instance.get_runs(ascending=True)
        records = {r.dagster_run.run_id: r for r in instance.get_run_records()}
    assert sorted(r.tags["dagster/partition"] for r in runs) == sorted(f"{f}@{s}" for f, s in FITS)
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    invocations = {r.tags[INVOCATION_TAG] for r in runs}
    workers = {r.tags["dagster/partition"].split("@")[1]: r.tags[PID_TAG] for r in runs}
    assert len(invocations) == 1 and len(set(workers.values())) == 2  # one worker per seed, neither the command
    assert invocations.isdisjoint(workers.values())
    by_seed = {}
    for run in runs:
        record = records[run.run_id]
        seed = run.tags["dagster/partition"].split("@")[1]
        start, end = by_seed.get(seed, (record.start_time, record.end_time))
        by_seed[seed] = (min(start, record.start_time), max(end, record.end_time))
        if run.tags["dagster/partition"].startswith("2022H2"):  # after its parent, fold 2022H1 of the same seed
            (parent,) = [r for r in runs if r.tags["dagster/partition"] == f"2022H1@{seed}"]
            assert record.start_time >= records[parent.run_id].end_time
    (a_start, a_end), (b_start, b_end) = by_seed.values()
    assert a_start < b_end and b_start < a_end, by_seed  # the two seeds' chains ran at once

    timings = _kp(side, "timings", "--invocation").stdout
    assert timings.splitlines()[0].startswith("run 4 runs"), timings[:500]

    alone = _copy(tmp_path / "alone")
    _kp(alone, "materialize", "--select", "splinegpt_foundation", KP_TRAIN_SIDE_BY_SIDE="1", KP_TRAIN_THREADS="1")
    ours, theirs = class_weight_vector(side), class_weight_vector(alone)
    for fit in FITS:
        assert ours[fit].keys() == theirs[fit].keys()
        for name, tensor in ours[fit].items():
            assert torch.equal(tensor, theirs[fit][name]), (fit, name)
