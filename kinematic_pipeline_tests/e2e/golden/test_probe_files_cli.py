"""Probes are data, never code, through the real Dagster CLI on the ci warehouse the DAG lane materialized
(``KP_GOLDEN_WAREHOUSE``): a planted pickle whose payload would write a file, a flipped byte and a truncated file of
each probe kind, each refused with one line naming the file and the asset to re-materialize, and the predictions'
bytes unchanged once the files are put back; a probe under a new training cut refuses features split for other folds.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.probe_models import FIT_FILE, LEGACY_PICKLE
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.warehouse import PREDICTIONS
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.conftest import dagster_materialize

FOLD, TAU = "2022H1", 0.01


MARKER = "payload_ran"


class _Payload:
    """What a planted pickle would run when loaded: it writes a marker file."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (Path(self.path), "ran"))


def _materialize(variant: str, policy: Policy) -> subprocess.CompletedProcess:
    key = policy.key
    args = dagster_materialize()
    args += ["--select", f"{variant}_predictions", "--partition", key]
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, "KP_PROFILE": "ci"}, timeout=600)


def _refused(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode != 0, proc.stdout[-2000:]
    output = proc.stdout + proc.stderr
    for fragment in fragments:
        assert fragment in output, (fragment, output[-3000:])


@pytest.mark.e2e
@pytest.mark.parametrize("variant", ["lr_spline", "lightgbm_spline"])
def test_a_planted_pickle_a_flipped_byte_or_a_truncated_probe_is_refused_by_the_cli(variant, tmp_path):
    path = os.environ.get("KP_GOLDEN_WAREHOUSE")
    if not path:
        pytest.skip("set KP_GOLDEN_WAREHOUSE (and DAGSTER_HOME) to a ci-profile warehouse materialized whole")
    settings = load_settings("ci", warehouse=path)
    wh = settings.warehouse
    policy = Policy.named(settings.folds, variant, 0, BuySellHold(TAU), FOLD)
    folder, predictions = wh.probe_dir(policy), wh.evaluation_file(PREDICTIONS, policy)
    model_file = next(f for f in folder.iterdir() if f.name.startswith("model."))
    assert model_file.suffix in (".json", ".txt") and not (folder / LEGACY_PICKLE).exists()
    before = file_sha256(predictions)
    backup = tmp_path / "kept"
    shutil.copytree(folder, backup)
    asset = f"re-materialize {variant}_probe partition"
    try:
        # a pickle in place of the model (what an older version saved, or what someone planted): refused unread
        marker = tmp_path / MARKER
        model_file.unlink()
        (folder / LEGACY_PICKLE).write_bytes(pickle.dumps(_Payload(str(marker))))
        _refused(_materialize(variant, policy), str(folder / LEGACY_PICKLE), "is not loaded", asset)
        assert not marker.exists(), "the pickle's payload ran"
        (folder / LEGACY_PICKLE).unlink()
        # one flipped byte, then a truncated file: the sha256 its fit record holds differs
        data = (backup / model_file.name).read_bytes()
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        for damaged in (bytes(flipped), data[: len(data) // 3]):
            model_file.write_bytes(damaged)
            _refused(_materialize(variant, policy), str(model_file), "sha256 differs", asset)
        model_file.write_bytes(data)
        (folder / FIT_FILE).write_bytes((backup / FIT_FILE).read_bytes()[:40])  # a truncated fit record
        _refused(_materialize(variant, policy), str(folder / FIT_FILE), "is not a probe's fit record", asset)
    finally:
        shutil.rmtree(folder)
        shutil.copytree(backup, folder)
    assert _materialize(variant, policy).returncode == 0
    assert file_sha256(predictions) == before


@pytest.mark.e2e
def test_a_probe_under_a_new_training_cut_refuses_features_split_for_other_folds(tmp_path):
    """``KP_TRAIN_END`` moved after the features were built (the ci warehouse's two walk-forward folds): fitting
    the probe through the CLI is refused, naming the features asset to re-materialize, predicting without the
    probe of this cut names the probe, and nothing is written."""
    path = os.environ.get("KP_GOLDEN_WAREHOUSE")
    if not path:
        pytest.skip("set KP_GOLDEN_WAREHOUSE (and DAGSTER_HOME) to a ci-profile warehouse materialized whole")
    settings = load_settings("ci", warehouse=path)
    moved = {**os.environ, "KP_PROFILE": "ci", "KP_TRAIN_END": "2021-09-30"}
    cut = load_settings("ci", warehouse=path, env=moved)
    policy = Policy.named(cut.folds, "lr_spline", 0, BuySellHold(TAU))  # the single cut's one fold
    before = sorted(p.name for p in settings.warehouse.root.joinpath("predictions").iterdir())
    key = policy.key
    expected = {  # the probe reads the features; its predictions need the probe of this cut first
        "lr_spline_probe": ("spline_features was built for other folds", "re-materialize spline_features"),
        "lr_spline_predictions": ("holds no fitted probe", f"materialize lr_spline_probe partition {key}"),
    }
    for asset, fragments in expected.items():
        args = dagster_materialize("--select", asset)
        proc = subprocess.run(args + ["--partition", key], capture_output=True, text=True, env=moved, timeout=600)
        _refused(proc, *fragments)
        assert not any(cut.warehouse.probe_dir(policy).glob("model.*"))
    assert sorted(p.name for p in settings.warehouse.root.joinpath("predictions").iterdir()) == before
