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
from pathlib import Path

import numpy as np
import pytest

import kinematic_pipeline
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.probe_models import LinearProbeModel, TreeProbeModel
from kinematic_pipeline.stages.features import check_features_cut, features_cut
from kinematic_pipeline.tokenizations import SPLINE


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
        check_features_cut(built, SPLINE)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(features_cut(built)))
    check_features_cut(built, SPLINE)  # the folds it was built for
    moved = load_settings("ci", warehouse=tmp_path, env=env)
    with pytest.raises(ValueError, match=r"built for other folds \(2022H1: train to 2021-09-29.*re-materialize spline"):
        check_features_cut(moved, SPLINE)
    path.write_text("{")
    with pytest.raises(ValueError, match="not a cut record"):
        check_features_cut(built, SPLINE)


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
