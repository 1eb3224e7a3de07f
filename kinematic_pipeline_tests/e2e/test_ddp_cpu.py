"""The multi-GPU training path without a GPU: `KP_TRAIN_ACCELERATOR=cpu KP_TRAIN_DEVICES=2` trains
splinegpt_foundation with `ddp_spawn` over two CPU ranks (gloo) inside a Dagster step
(`dagster asset materialize`, multiprocess executor: the step is its own process, as on a cluster).

Checks: both ranks served equal shares of each epoch's sample, and what they served, day by day
(KP_TRAIN_SHARD_TRACE), is what the foundation's lineage (shards_used.parquet) records; the checkpoint is
written once (one model.pt, one set of Lightning checkpoints, one materialization with its sha256); the
training loss is finite and decreases.

    pytest -m e2e kinematic_pipeline_tests/e2e/test_ddp_cpu.py
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from kinematic_pipeline.policy import Foundation
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.helpers import ROOT

BIN = Path(sys.executable).parent

pytestmark = pytest.mark.e2e


def _run(cmd: list[str], env: dict[str, str]) -> str:
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    return out.stdout + out.stderr


def test_two_cpu_ranks_train_a_foundation_with_ddp_spawn_inside_a_dagster_step(tmp_path):
    home, warehouse, trace = tmp_path / "dagster_home", tmp_path / "warehouse", tmp_path / "trace"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # its storages live under home, whatever the cwd
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KP_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        KP_PROFILE="ci",
        KP_WAREHOUSE=str(warehouse),
        KP_END_DATE="2021-08-31",  # ~105 token days, all in the first fold's training period
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    inputs = " or ".join(
        f"key:{k}" for k in ("raw_ohlcv", "spline_tokens", "spline_corpus_stats", "spline_window_store")
    )
    _run([sys.executable, "-m", "kinematic_pipeline", "materialize", "--select", inputs], env)

    # A budget of two whole epochs, validated at the end of each (and before the first step): a run that ended
    # inside an epoch would have served one batch more than it trained on (Lightning fetches one ahead).
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.training.data import WindowDataModule

    settings = load_settings(env=env)
    policy = Foundation.named(settings.folds, "splinegpt", 1234, "2022H1")
    dm = WindowDataModule(settings, policy)
    per_epoch = dm.steps_per_epoch(parts=2)
    env.update(KP_TRAIN_ACCELERATOR="cpu", KP_TRAIN_DEVICES="2", KP_TRAIN_SHARD_TRACE=str(trace))
    env.update(KP_PRETRAIN_STEPS=str(2 * per_epoch), KP_EVAL_EVERY=str(per_epoch))
    cmd = [str(BIN / "dagster"), "asset", "materialize", "-m", "kinematic_pipeline", "--select", "splinegpt_foundation"]
    cmd += ["--partition", "2022H1@1234"]  # one fold's and seed's foundation (the ci profile's first fold)
    output = _run(cmd, env)
    assert "RUN_SUCCESS" in output

    # Both ranks served equal shares of each epoch; together, day by day, what the lineage says was served.
    cols = ["epoch", "split", "rank", "day", "windows"]
    served = pl.concat(
        [
            pl.read_csv(p, separator="\t", has_header=False, new_columns=cols, schema_overrides={"day": pl.String})
            for p in sorted(trace.glob("rank*.tsv"))
        ]
    )
    assert sorted(served["rank"].unique().to_list()) == [0, 1], served
    for (epoch, split), group in served.group_by(["epoch", "split"]):
        per_rank = group.group_by("rank").agg(pl.col("windows").sum()).sort("rank")["windows"].to_list()
        assert len(per_rank) == 2 and per_rank[0] == per_rank[1] > 0, (epoch, split, per_rank)
    out_dir = Warehouse(warehouse).foundation_dir(policy)
    used = pl.read_parquet(out_dir / "shards_used.parquet").filter(pl.col("served") > 0)
    for split in ("train", "val"):
        traced = served.filter(pl.col("split") == split).group_by("day").agg(pl.col("windows").sum())
        recorded = used.filter(pl.col("split") == split).select(pl.col("date").alias("day"), "served")
        assert dict(traced.iter_rows()) == dict(recorded.iter_rows()), split

    # The checkpoint is written once: rank 0 saves, the step process writes model.pt.
    assert sorted(p.name for p in (out_dir / "checkpoints").iterdir()) == ["last.ckpt"]
    curves = pl.read_csv(out_dir / "curves.csv")
    assert curves["step"].to_list() == [0, per_epoch, 2 * per_epoch] and curves["best"].sum() == 1
    assert len(list(out_dir.rglob("model*.pt"))) == 1
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey("splinegpt_foundation"), limit=10).records
        assert len(records) == 1
        metadata = records[0].asset_materialization.metadata
        assert metadata["checkpoint_sha256"].value == file_sha256(out_dir / "model.pt")

    # The loss is finite and decreasing (rank 0's CSV log).
    metrics = pl.read_csv(out_dir / "logs" / "version_0" / "metrics.csv", infer_schema_length=None)
    losses = metrics["train/loss_step"].drop_nulls().to_list()
    assert len(losses) >= 2 and all(math.isfinite(v) for v in losses), losses
    third = max(1, len(losses) // 3)
    assert losses[-1] < losses[0] and sum(losses[-third:]) < sum(losses[:third]), losses
    val = metrics["val/loss"].drop_nulls().to_list()
    assert val and all(math.isfinite(v) for v in val), val
    print(f"DDP over 2 CPU ranks: train loss {losses[0]:.4f} -> {losses[-1]:.4f} ({len(losses)} logged), val {val}")
