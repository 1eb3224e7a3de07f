"""The probes' learners, one entry each (``LEARNERS``): logistic regression (scikit-learn) and LightGBM, with their
hyperparameters here and nowhere else. A probe variant names its learner (``ProbeVariant.learner``); fitting asks
the table, never which learner it is. The fitted model is kept as the numbers it is saved as
(``probe_models``). No dagster here; scikit-learn and LightGBM are imported when a learner fits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kinematic_pipeline.config import EvalConfig
from kinematic_pipeline.probe_models import LinearProbeModel, ProbeModel, TreeProbeModel

MIN_LEAF_ROWS = 2000  # LightGBM's rows a leaf at the universe's scale (fewer on small corpora: 0.5% of rows)
LR_PARAMS = {"C": 1.0}  # scikit-learn's LogisticRegression (lbfgs); max_iter: evaluate.probe_lr_max_iter
LIGHTGBM_PARAMS = {  # n_estimators: evaluate.probe_trees; min_child_samples: min_leaf_rows
    "objective": "multiclass",
    "learning_rate": 0.1,
    "num_leaves": 15,
    "subsample": 0.3,  # each tree sees a seeded 30% of the rows; over the trees, every row
    "subsample_freq": 1,
    "colsample_bytree": 0.8,
    "max_bin": 63,
    "deterministic": True,
    "force_row_wise": True,
    "verbose": -1,
}
EARLY_STOPPING_ROUNDS = 20  # LightGBM stops when the validation days' weighted log loss has not improved for as many


@dataclass(frozen=True)
class FitRows:
    """What a learner fits on: z-scored training and validation rows, their labels and the class weights."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    weights: np.ndarray  # [Buy, Sell, Hold]: sample weights of each row by its label
    seed: int
    threads: int


def min_leaf_rows(train_rows: int) -> int:
    """LightGBM's least rows a leaf: 0.5% of the training rows, between 20 and ``MIN_LEAF_ROWS``."""
    return int(min(MIN_LEAF_ROWS, max(20, train_rows // 200)))


def fit_logistic(rows: FitRows, ev: EvalConfig) -> tuple[ProbeModel, int]:
    """Multinomial logistic regression, class-weighted; (the model, lbfgs's iterations)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(**LR_PARAMS, max_iter=ev.probe_lr_max_iter, class_weight=dict(enumerate(rows.weights)))
    model.fit(rows.x_train, rows.y_train)
    return LinearProbeModel.of(model), int(np.max(model.n_iter_))


def fit_lightgbm(rows: FitRows, ev: EvalConfig) -> tuple[ProbeModel, int]:
    """Gradient-boosted trees, sample-weighted by class, stopped early on the validation days when they hold two
    classes or more; (the model, the trees kept)."""
    import lightgbm as lgb

    model = lgb.LGBMClassifier(
        **LIGHTGBM_PARAMS,
        n_estimators=ev.probe_trees,
        min_child_samples=min_leaf_rows(len(rows.y_train)),
        random_state=rows.seed,
        n_jobs=rows.threads,
    )
    fit_kw = {}
    if len(rows.y_val) and len(np.unique(rows.y_val)) > 1:
        fit_kw = dict(
            eval_X=(rows.x_val,),
            eval_y=(rows.y_val,),
            eval_sample_weight=[rows.weights[rows.y_val]],
            callbacks=[lgb.early_stopping(EARLY_STOPPING_ROUNDS, verbose=False)],
        )
    model.fit(rows.x_train, rows.y_train, sample_weight=rows.weights[rows.y_train], **fit_kw)
    return TreeProbeModel.of(model, rows.threads), int(model.best_iteration_ or model.n_estimators)


@dataclass(frozen=True)
class Learner:
    name: str
    dagster_kind: str  # the kind its probe assets show in the UI
    described: str  # what its probe asset's description adds
    fit: Callable[[FitRows, EvalConfig], tuple[ProbeModel, int]]


LEARNERS = {
    "lr": Learner("lr", "scikitlearn", "", fit_logistic),
    "lightgbm": Learner("lightgbm", "lightgbm", ", LightGBM with early stopping on the validation days", fit_lightgbm),
}
