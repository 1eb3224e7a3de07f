"""Probes are data, never code: saved as numbers (a logistic regression's coefficients) or LightGBM's text model,
read back to the same probabilities as the fitted estimator, checked against the sha256 their fit record holds,
and never unpickled (a pickle left by an older version, or planted, is refused unread).

The fast tests fit small estimators here; the e2e test goes through the real Dagster CLI on the ci warehouse that
``.ci/run`` materialized (``KP_GOLDEN_WAREHOUSE``): a planted pickle whose payload would write a file, a flipped
byte and a truncated file of each probe kind, each refused with one line naming the file and the asset to
re-materialize, and the predictions' bytes unchanged once the files are put back.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kinematic_pipeline
from kinematic_pipeline.atomic_files import file_sha256
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.probe_models import FIT_FILE, LEGACY_PICKLE, LinearProbeModel, TreeProbeModel
from kinematic_pipeline.stages.features import check_features_cut, features_cut
from kinematic_pipeline.warehouse import PREDICTIONS
from kinematic_pipeline_tests.conftest import cli


def _classification(n: int = 600, d: int = 5, classes=(0, 1, 2), seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    logits = x @ rng.normal(size=(d, len(classes)))
    y = np.asarray(classes)[np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)]
    return x, y


@pytest.mark.parametrize("classes", [(0, 1, 2), (0, 2)])
def test_a_linear_probe_saved_as_numbers_predicts_what_scikit_learn_predicts(classes):
    from sklearn.linear_model import LogisticRegression

    x, y = _classification(classes=classes)
    fitted = LogisticRegression(C=1.0, max_iter=200).fit(x, y)
    probe = LinearProbeModel.from_bytes(LinearProbeModel.of(fitted).to_bytes())
    np.testing.assert_array_equal(probe.classes_, fitted.classes_)
    np.testing.assert_allclose(probe.predict_proba(x), fitted.predict_proba(x), rtol=0, atol=1e-14)


def test_a_lightgbm_probe_saved_as_its_text_model_predicts_what_the_classifier_predicts():
    import lightgbm as lgb

    x, y = _classification(n=2000)
    fitted = lgb.LGBMClassifier(objective="multiclass", n_estimators=200, num_leaves=7, verbose=-1)
    fitted.fit(
        x[:1500], y[:1500], eval_X=(x[1500:],), eval_y=(y[1500:],), callbacks=[lgb.early_stopping(5, verbose=False)]
    )
    assert 0 < fitted.best_iteration_ < 200  # stopped early: the saved trees are the best iteration's
    probe = TreeProbeModel.from_bytes(TreeProbeModel.of(fitted, 1).to_bytes(), fitted.classes_.tolist())
    np.testing.assert_allclose(probe.predict_proba(x), fitted.predict_proba(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{}",
        b'{"format": "kinematic_pipeline linear probe 1", "classes": [0, 1, 2], "coef": [[1.0]],'
        b' "intercept": [0.0, 0.0]}',
    ],
)
def test_a_damaged_linear_probe_is_an_error_not_a_model(data):
    with pytest.raises(ValueError):
        LinearProbeModel.from_bytes(data)


@pytest.mark.parametrize("env", [{"KP_TRAIN_END": "2021-09-30"}, {"KP_FOLDS": "1"}])
def test_features_split_for_other_folds_are_refused_naming_the_asset(tmp_path, env):
    built = load_settings("ci", warehouse=tmp_path, env={})
    path = built.warehouse.features_cut_file("spline")
    with pytest.raises(ValueError, match="missing .*re-materialize spline_features"):
        check_features_cut(built, "spline")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(features_cut(built)))
    check_features_cut(built, "spline")  # the folds it was built for
    moved = load_settings("ci", warehouse=tmp_path, env=env)
    with pytest.raises(ValueError, match=r"built for other folds \(2022H1: train to 2021-09-29.*re-materialize spline"):
        check_features_cut(moved, "spline")
    path.write_text("{")
    with pytest.raises(ValueError, match="not a cut record"):
        check_features_cut(built, "spline")


def test_nothing_in_the_package_unpickles_or_loads_torch_files_unchecked():
    """No ``pickle``/``joblib``/``cloudpickle``/``dill`` load, and every ``torch.load`` passes weights_only=True."""
    loaders = {"pickle", "joblib", "cloudpickle", "dill", "_pickle"}
    found = []
    for path in Path(kinematic_pipeline.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else None
            where = f"{path.name}:{node.lineno}"
            if name in loaders and node.func.attr in {"load", "loads", "Unpickler"}:
                found.append(f"{where} {name}.{node.func.attr}")
            if name == "torch" and node.func.attr == "load":
                safe = any(k.arg == "weights_only" and getattr(k.value, "value", None) is True for k in node.keywords)
                if not safe:
                    found.append(f"{where} torch.load without weights_only=True")
    assert not found, found


# ---- through the real CLI, on the ci warehouse .ci/run materialized ------------------------------------------

FOLD, TAU = "2022H1", 0.01
MARKER = "payload_ran"


class _Payload:
    """What a planted pickle would run when loaded: it writes a marker file."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (Path(self.path), "ran"))


def _materialize(variant: str, policy: Policy) -> subprocess.CompletedProcess:
    key = "|".join(policy.partition.values())
    args = [cli("dagster"), "asset", "materialize", "-m", "kinematic_pipeline"]
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
    policy = Policy(variant, 0, TAU, FOLD)
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
    policy = Policy("lr_spline", 0, TAU, None)  # the single cut's one fold
    before = sorted(p.name for p in settings.warehouse.root.joinpath("predictions").iterdir())
    key = "|".join(policy.partition.values())
    expected = {  # the probe reads the features; its predictions need the probe of this cut first
        "lr_spline_probe": ("spline_features was built for other folds", "re-materialize spline_features"),
        "lr_spline_predictions": ("holds no fitted probe", f"materialize lr_spline_probe partition {key}"),
    }
    for asset, fragments in expected.items():
        args = [cli("dagster"), "asset", "materialize", "-m", "kinematic_pipeline", "--select", asset]
        proc = subprocess.run(args + ["--partition", key], capture_output=True, text=True, env=moved, timeout=600)
        _refused(proc, *fragments)
        assert not any(cut.warehouse.probe_dir(policy).glob("model.*"))
    assert sorted(p.name for p in settings.warehouse.root.joinpath("predictions").iterdir()) == before
