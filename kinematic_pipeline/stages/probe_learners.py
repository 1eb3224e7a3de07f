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
REGRESSION_OBJECTIVES = ("gamma",)  # ``Task.probe_objective``s the learners fit besides classes
EARLY_STOPPING_ROUNDS = 20  # LightGBM stops when the validation days' weighted log loss has not improved for as many


@dataclass(frozen=True)
class FitRows:
    """What a learner fits on: z-scored training and validation rows, their labels and the class weights; for a
    regression (``objective``), the targets (a log variance) and no weights."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    weights: np.ndarray | None  # [Buy, Sell, Hold]: sample weights of each row by its label; None: a regression
    seed: int
    threads: int
    objective: str | None = None  # ``Task.probe_objective``: None, classes


def gamma_loss(log_target: np.ndarray, log_forecast: np.ndarray) -> float:
    """The mean QLIKE of exp(target) against exp(forecast): half the Gamma deviance, what a "gamma" probe fits."""
    gap = np.asarray(log_target, np.float64) - np.asarray(log_forecast, np.float64)
    return float(np.mean(np.exp(gap) - gap - 1.0)) if gap.size else float("nan")


def min_leaf_rows(train_rows: int) -> int:
    """LightGBM's least rows a leaf: 0.5% of the training rows, between 20 and ``MIN_LEAF_ROWS``."""
    return int(min(MIN_LEAF_ROWS, max(20, train_rows // 200)))


def fit_logistic(rows: FitRows, ev: EvalConfig) -> tuple[ProbeModel, int]:
    """Multinomial logistic regression, class-weighted; (the model, lbfgs's iterations). On a "gamma" objective,
    its regression twin (``fit_gamma_linear``)."""
    if rows.objective is not None:
        return fit_gamma_linear(rows, ev)
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(**LR_PARAMS, max_iter=ev.probe_lr_max_iter, class_weight=dict(enumerate(rows.weights)))
    model.fit(rows.x_train, rows.y_train)
    return LinearProbeModel.of(model), int(np.max(model.n_iter_))


def fit_gamma_linear(rows: FitRows, ev: EvalConfig) -> tuple[ProbeModel, int]:
    """A linear forecast of the log variance fitted on QLIKE: scikit-learn's ``GammaRegressor`` (log link)
    of exp(target), with the logistic probe's L2 penalty (C = 1 on a summed loss: alpha = 1 / rows on its mean);
    (the model, the solver's iterations)."""
    from sklearn.linear_model import GammaRegressor

    alpha = LR_PARAMS["C"] / max(len(rows.y_train), 1)
    # Newton-Cholesky: a few exact steps for tens of features (lbfgs stopped at 300 iterations unconverged on the
    # real file's 54 correlated token features, 150,000 rows)
    model = GammaRegressor(alpha=alpha, solver="newton-cholesky", max_iter=ev.probe_lr_max_iter)
    model.fit(rows.x_train, np.exp(rows.y_train))
    return LinearProbeModel.regression(model), int(model.n_iter_)


def fit_lightgbm(rows: FitRows, ev: EvalConfig) -> tuple[ProbeModel, int]:
    """Gradient-boosted trees, sample-weighted by class, stopped early on the validation days when they hold two
    classes or more; (the model, the trees kept). On a "gamma" objective, trees of the log variance fitted on
    QLIKE (LightGBM's gamma objective: log link, the Gamma deviance), stopped early on the validation days."""
    import lightgbm as lgb

    if rows.objective is not None:
        params = LIGHTGBM_PARAMS | {"objective": rows.objective}
        regressor = lgb.LGBMRegressor(
            **params,
            n_estimators=ev.probe_trees,
            min_child_samples=min_leaf_rows(len(rows.y_train)),
            random_state=rows.seed,
            n_jobs=rows.threads,
        )
        stop = [lgb.early_stopping(EARLY_STOPPING_ROUNDS, verbose=False)] if len(rows.y_val) else None
        validation = dict(eval_X=(rows.x_val,), eval_y=(np.exp(rows.y_val),), callbacks=stop) if stop else {}
        regressor.fit(rows.x_train, np.exp(rows.y_train), **validation)
        return TreeProbeModel.of(regressor, rows.threads), int(regressor.best_iteration_ or regressor.n_estimators)

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
