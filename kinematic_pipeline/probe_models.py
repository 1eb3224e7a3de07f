"""A fitted probe as data, never as code: a logistic regression's numbers (JSON) and a LightGBM model's own text.

``LinearProbeModel`` and ``TreeProbeModel`` have scikit-learn's ``predict_proba`` (a classifier) and
``predict_log`` (a regression on a log link: the volatility task's); both are written and read back
byte for byte (``to_bytes`` / ``from_bytes``), so a probe folder received from someone else can hold wrong numbers
(refused by the sha256 its fit record holds, ``pins.load_probe``), never a payload that runs. No dagster here.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np

from kinematic_pipeline.warehouse.layout import (
    PROBE_FIT_FILE,
    PROBE_LEGACY_PICKLE,
    PROBE_MODEL_FILES,
    PROBE_TIMING_FILE,
)

MODEL_FILES = PROBE_MODEL_FILES  # learner -> the model's file (data, not code)
FIT_FILE = PROBE_FIT_FILE  # how a probe was fitted, beside its model
TIMING_FILE = PROBE_TIMING_FILE  # how long it took: beside them, in no pin and no check
LEGACY_PICKLE = PROBE_LEGACY_PICKLE  # what versions before issue 30 saved: refused, never loaded
LINEAR_FORMAT = "kinematic_pipeline linear probe 1"


@dataclass(frozen=True)
class LinearProbeModel:
    """A fitted logistic regression as numbers: ``predict_proba`` as scikit-learn's (a softmax of x W' + b over
    the classes seen in training; a logistic for two)."""

    classes_: np.ndarray  # (k,) the training labels among Buy, Sell, Hold
    coef: np.ndarray  # (k, d), or (1, d) for two classes
    intercept: np.ndarray  # (k,), or (1,)

    @classmethod
    def of(cls, model) -> LinearProbeModel:
        """From a fitted ``sklearn.linear_model.LogisticRegression``."""
        return cls(np.asarray(model.classes_, np.int64), np.asarray(model.coef_), np.asarray(model.intercept_))

    @classmethod
    def regression(cls, model) -> LinearProbeModel:
        """From a fitted log-link regression (``sklearn.linear_model.GammaRegressor``): no classes, one row of
        coefficients, read by ``predict_log``."""
        coef = np.asarray(model.coef_, np.float64).reshape(1, -1)
        return cls(np.zeros(0, np.int64), coef, np.asarray([model.intercept_], np.float64))

    def predict_log(self, x: np.ndarray) -> np.ndarray:
        """(n,) a regression's forecast on its link's scale: x w' + b."""
        return (x @ self.coef.T + self.intercept)[:, 0]

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        from scipy.special import expit, softmax

        z = x @ self.coef.T + self.intercept  # (n, k) or (n, 1)
        if z.shape[1] == 1:
            p = expit(z[:, 0])
            return np.column_stack([1.0 - p, p])
        return softmax(z, axis=1)

    def to_bytes(self) -> bytes:
        record = {
            "format": LINEAR_FORMAT,
            "classes": self.classes_.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept.tolist(),
        }
        return json.dumps(record).encode()  # floats as repr: they read back bit for bit

    @classmethod
    def from_bytes(cls, data: bytes) -> LinearProbeModel:
        record = json.loads(data)
        if record.get("format") != LINEAR_FORMAT:
            raise ValueError(f"not a linear probe (format {record.get('format')!r})")
        coef, intercept = np.asarray(record["coef"], np.float64), np.asarray(record["intercept"], np.float64)
        classes = np.asarray(record["classes"], np.int64)
        if coef.ndim != 2 or intercept.shape != (coef.shape[0],) or coef.shape[0] not in (1, classes.size):
            raise ValueError(
                f"coefficients {coef.shape} and intercepts {intercept.shape} do not fit {classes.size} classes"
            )
        return cls(classes, coef, intercept)


@dataclass(frozen=True)
class TreeProbeModel:
    """A fitted LightGBM classifier as its text model (the trees up to the best validation iteration)."""

    classes_: np.ndarray
    text: str
    threads: int = 1

    @classmethod
    def of(cls, model, threads: int) -> TreeProbeModel:
        """From a fitted ``lightgbm.LGBMClassifier`` (its best iteration when it stopped early), or a regressor (no
        classes)."""
        classes = np.asarray(getattr(model, "classes_", ()), np.int64)
        return cls(classes, model.booster_.model_to_string(), threads)

    def predict_log(self, x: np.ndarray) -> np.ndarray:
        """(n,) a regression's forecast on its link's scale (LightGBM's raw score: the log mean of a gamma model)."""
        return np.asarray(self.booster.predict(x, raw_score=True, num_threads=self.threads), np.float64)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        p = np.asarray(self.booster.predict(x, num_threads=self.threads))
        return np.column_stack([1.0 - p, p]) if p.ndim == 1 else p

    @functools.cached_property
    def booster(self):
        import lightgbm as lgb

        return lgb.Booster(model_str=self.text)

    def to_bytes(self) -> bytes:
        return self.text.encode()

    @classmethod
    def from_bytes(cls, data: bytes, classes: list[int], threads: int = 1) -> TreeProbeModel:
        model = cls(np.asarray(classes, np.int64), data.decode(), threads)
        _ = model.booster  # parse now: a damaged file fails here, named by the caller
        return model


ProbeModel = LinearProbeModel | TreeProbeModel
