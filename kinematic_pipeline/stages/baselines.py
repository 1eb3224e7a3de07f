"""The simple baselines beside the transformers: probes fitted on the features files, and fixed rules.

- ``fit_probe``: a multinomial logistic regression (scikit-learn, lbfgs, C = 1) or a LightGBM tree model
  (15 leaves, at least ``MIN_LEAF_ROWS`` rows a leaf, learning rate 0.1, 63 bins, each tree on 30% of the rows
  and 80% of the features drawn with the policy's seed, early stopping after 20 rounds without a better
  validation loss) on every labelled training ticker-day of the universe at the
  policy's tau, with the features z-scored by the training rows' mean and std (clipped at +-``CLIP``) and
  the models' class weights (``train.class_weights``), so that their softmax is read like the models' (the
  paper's weighted argmax; the weights undone elsewhere). Saved under ``Warehouse.probe_dir`` as data, never
  as code: a logistic regression's classes, coefficients and intercepts (``model.json``), a LightGBM model's own
  text format (``model.txt``), and ``fit.json`` (scaler, rows, days, iterations, validation loss, seconds, the
  model file's sha256). Nothing here unpickles: a probe folder received from someone else can hold wrong numbers
  (refused by the sha256 check), never a payload that runs (a pickle of an older version is refused unread).
- rules (fitted on nothing): always Hold; momentum: Buy when the last 1-day (20-day) log return is above
  tau, Sell when below -tau, else Hold. They decide: their "probabilities" are the one-hot action.

``baseline_predictions`` turns either into the predictions of a policy (the same schema and files as the
models': the backtested tickers' test days, their validation days, and the universe at the report's tau).
No dagster here.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline import exact_paths as exact
from kinematic_pipeline.atomic_files import file_sha256, write_bytes_atomic
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import fold_of
from kinematic_pipeline.label_rules import tau_column
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.probe_features import feature_columns, features_tokenization
from kinematic_pipeline.variants import BUY, HOLD, SELL
from kinematic_pipeline.variants import variant as lookup_variant

CLIP = 10.0  # z-scores beyond this are clipped (a winsorization of rare extreme windows)
MIN_LEAF_ROWS = 2000  # LightGBM's rows a leaf at the universe's scale (fewer on small corpora: 0.5% of rows)
MODEL_FILES = {"lr": "model.json", "lightgbm": "model.txt"}  # learner -> the model's file (data, not code)
FIT_FILE = "fit.json"
LEGACY_PICKLE = "model.joblib"  # what versions before issue 30 saved: refused, never loaded
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
        """From a fitted ``lightgbm.LGBMClassifier`` (its best iteration when it stopped early)."""
        return cls(np.asarray(model.classes_, np.int64), model.booster_.model_to_string(), threads)

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


@dataclass(frozen=True)
class ProbeFit:
    policy: Policy
    folder: Path
    fit: dict

    def metadata(self) -> dict:
        return {k: v for k, v in self.fit.items() if not isinstance(v, list)} | {"path": self.folder}


def features_path(settings: Settings, variant: str, part: str = "training") -> Path:
    """The variant's features file: ``training`` (train and validation rows) or ``test``."""
    spec = lookup_variant(variant)
    feature_set = spec.features if spec.family == "probe" else "raw"
    return settings.warehouse.features_file(features_tokenization(feature_set), part)


def read_features(
    settings: Settings,
    variant: str,
    splits: tuple[str, ...],
    extra: tuple[str, ...] = (),
    fold: str | None = None,
) -> pl.DataFrame:
    """The rows of ``splits`` of the variant's features for ``fold`` (a ``Policy.fold``), with its feature
    columns and ``extra``: ``("test",)`` the test file's rows of the fold's test period; otherwise the training
    file's rows on or before the fold's training end, split by the fold's own dates (``features.fold_split``),
    with every label of a day after the fold's ``label_end`` (the purge) set to null."""
    from kinematic_pipeline.stages.features import check_features_cut, fold_split

    part = "test" if splits == ("test",) else "training"
    spec, path = lookup_variant(variant), features_path(settings, variant, part)
    if not path.exists():
        asset = f"{path.parent.name}_features"
        raise FileNotFoundError(f"{path} is missing: materialize {asset} (what {variant} reads)")
    check_features_cut(settings, path.parent.name)  # split for this run's folds, or refused
    columns = feature_columns(spec.features) if spec.family == "probe" else ("ret1", "ret20")
    scope = fold_of(settings, fold)
    scan = exact.scan_parquet(path)
    date = pl.col("date")
    if part == "test":
        in_fold = (
            date >= scope.test_start if scope.test_end is None else date.is_between(scope.test_start, scope.test_end)
        )
        scan = scan.filter(in_fold)
    else:
        _, validation = fold_split(settings, spec.token_asset, scope)
        split = pl.when(date.is_in(validation)).then(pl.lit("validation")).otherwise(pl.lit("train"))
        labels = [c for c in extra if c in {tau_column(t) for t in settings.tokenize.taus}]
        purged = [pl.when(date > scope.label_end).then(None).otherwise(pl.col(c)).alias(c) for c in labels]
        scan = scan.filter(date <= scope.train_end).with_columns(split.alias("split"), *purged)
    return scan.filter(pl.col("split").is_in(splits)).select("ticker", "date", "split", *columns, *extra).collect()


def _matrix(frame: pl.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    return frame.select(columns).to_numpy().astype(np.float64)


def _standardize(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    z = (x - mean) / std
    return np.clip(np.nan_to_num(z, nan=0.0, posinf=CLIP, neginf=-CLIP), -CLIP, CLIP)


def fit_probe(settings: Settings, policy: Policy) -> ProbeFit:
    """Fit the probe of ``policy`` on the training rows of its features file; save it (data, not a pickle) with
    its fit record, which holds the model file's sha256; the fit record."""
    model, fit = train_probe(settings, policy)
    folder = settings.warehouse.probe_dir(policy)
    folder.mkdir(parents=True, exist_ok=True)
    data = model.to_bytes()
    fit = fit | {"model_file": MODEL_FILES[fit["learner"]], "model_sha256": hashlib.sha256(data).hexdigest()}
    write_bytes_atomic(folder / fit["model_file"], data)
    write_bytes_atomic(folder / FIT_FILE, json.dumps(fit, indent=1).encode())
    (folder / LEGACY_PICKLE).unlink(missing_ok=True)
    return ProbeFit(policy, folder, fit)


def train_probe(settings: Settings, policy: Policy) -> tuple[ProbeModel, dict]:
    """The probe of ``policy`` fitted on the labelled training rows of its features file (at most
    ``evaluate.probe_max_train_rows``: a sample seeded by the policy's seed) and its fit record, as ``load_probe``
    returns them (the model as the numbers it is saved as, so it predicts alike loaded or not); nothing is
    written."""
    spec, started = lookup_variant(policy.variant), time.perf_counter()
    if spec.family != "probe":
        raise ValueError(f"{policy.variant} is not a probe")
    label = tau_column(policy.tau)
    columns = feature_columns(spec.features)
    frame = read_features(settings, policy.variant, ("train", "validation"), (label,), policy.fold)
    frame = frame.filter(pl.col(label).is_not_null() & (pl.col(label) >= 0))
    train, val = frame.filter(pl.col("split") == "train"), frame.filter(pl.col("split") == "validation")
    if train.height == 0:
        raise ValueError(f"{policy}: no labelled training row in {features_path(settings, policy.variant)}")
    cap = settings.evaluate.probe_max_train_rows
    if cap is not None and train.height > cap:  # a seeded uniform sample of the fold's labelled training rows
        train = train.sample(n=cap, seed=policy.seed).sort("ticker", "date")
    x_train = _matrix(train, columns)
    mean, std = np.nanmean(x_train, axis=0), np.nanstd(x_train, axis=0)
    std = np.where(std > 0, std, 1.0)
    x_train = _standardize(x_train, mean, std)
    y_train = train[label].to_numpy().astype(np.int64)
    weights = np.asarray(settings.train.class_weights, dtype=np.float64)
    x_val = _standardize(_matrix(val, columns), mean, std)
    y_val = val[label].to_numpy().astype(np.int64)
    ev = settings.evaluate
    if spec.learner == "lr":
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=1.0, max_iter=ev.probe_lr_max_iter, class_weight=dict(enumerate(weights)))
        model.fit(x_train, y_train)
        iterations = int(np.max(model.n_iter_))
        model = LinearProbeModel.of(model)
    else:
        import lightgbm as lgb

        min_leaf = int(min(MIN_LEAF_ROWS, max(20, train.height // 200)))  # 2,000 at the universe's scale
        model = lgb.LGBMClassifier(
            objective="multiclass",
            n_estimators=ev.probe_trees,
            learning_rate=0.1,
            num_leaves=15,
            min_child_samples=min_leaf,
            subsample=0.3,  # each tree sees a seeded 30% of the rows; over the trees, every row
            subsample_freq=1,
            colsample_bytree=0.8,
            max_bin=63,
            random_state=policy.seed,
            n_jobs=ev.probe_threads,
            deterministic=True,
            force_row_wise=True,
            verbose=-1,
        )
        fit_kw = {}
        if val.height and len(np.unique(y_val)) > 1:
            fit_kw = dict(
                eval_X=(x_val,),
                eval_y=(y_val,),
                eval_sample_weight=[weights[y_val]],
                callbacks=[lgb.early_stopping(20, verbose=False)],
            )
        model.fit(x_train, y_train, sample_weight=weights[y_train], **fit_kw)
        iterations = int(model.best_iteration_ or model.n_estimators)
        model = TreeProbeModel.of(model, ev.probe_threads)
    val_loss = float("nan")
    if val.height:
        q = _classes3(model, model.predict_proba(x_val))
        val_loss = float(
            np.average(-np.log(np.clip(q[np.arange(len(y_val)), y_val], 1e-12, 1)), weights=weights[y_val])
        )
    fit = {
        "variant": policy.variant,
        "learner": spec.learner,
        "seed": policy.seed,
        "tau": policy.tau,
        "features": list(columns),
        "classes": model.classes_.tolist(),
        "mean": mean.tolist(),
        "std": std.tolist(),
        "train_rows": int(train.height),
        "validation_rows": int(val.height),
        "train_days": f"{train['date'].min()} .. {train['date'].max()}",
        "validation_days": f"{val['date'].min()} .. {val['date'].max()}" if val.height else "none",
        "iterations": iterations,
        "validation_weighted_log_loss": round(val_loss, 6),
        "fold": fold_of(settings, policy.fold).label,
        "train_end": str(fold_of(settings, policy.fold).train_end),  # the cut it was fitted for: checked on load
        "features_sha256": file_sha256(features_path(settings, policy.variant)),  # the training file's
        "fit_seconds": round(time.perf_counter() - started, 2),
    }
    return model, fit


def _classes3(model, proba: np.ndarray) -> np.ndarray:
    """Probabilities in the column order Buy, Sell, Hold even when a class never appeared in training."""
    out = np.zeros((proba.shape[0], 3), dtype=np.float64)
    out[:, np.asarray(model.classes_, dtype=np.int64)] = proba
    return out


def _rematerialize(policy: Policy) -> str:
    return f"re-materialize {policy.variant}_probe partition {'|'.join(policy.partition.values())}"


def probe_files(settings: Settings, policy: Policy) -> list[Path]:
    """The files of a fitted probe (its model, its fit record); a clear error naming the asset when it was not
    fitted, or was saved by an older version as a pickle (never loaded)."""
    folder = settings.warehouse.probe_dir(policy)
    models = [folder / name for name in MODEL_FILES.values() if (folder / name).exists()]
    if not models and (folder / LEGACY_PICKLE).exists():
        raise ValueError(
            f"{folder / LEGACY_PICKLE} is a pickle saved by an older version: it is not loaded (a pickle runs code); "
            f"{_rematerialize(policy)}"
        )
    if len(models) != 1 or not (folder / FIT_FILE).exists():
        raise FileNotFoundError(
            f"{folder} holds no fitted probe: materialize {policy.variant}_probe partition "
            f"{'|'.join(policy.partition.values())}"
        )
    return [models[0], folder / FIT_FILE]


def load_probe(settings: Settings, policy: Policy) -> tuple[ProbeModel, dict]:
    """The fitted probe of ``policy`` and its fit record, read as data once checked: the model file against the
    sha256 its fit record holds, the training features file against the one it was fitted on. Each failure is
    one ValueError naming the file and the asset to re-materialize."""
    model_file, fit_file = probe_files(settings, policy)
    try:
        fit = json.loads(fit_file.read_text())
        expected = fit["model_sha256"], fit["model_file"], fit["learner"], fit["classes"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{fit_file} is not a probe's fit record ({type(exc).__name__}: {exc}): {_rematerialize(policy)}"
        ) from None
    data = model_file.read_bytes()
    if model_file.name != expected[1] or hashlib.sha256(data).hexdigest() != expected[0]:
        raise ValueError(
            f"{model_file} is not the file its fit record {fit_file.name} describes (sha256 differs: changed or "
            f"damaged since it was fitted): {_rematerialize(policy)}"
        )
    train_end = str(fold_of(settings, policy.fold).train_end)
    if fit.get("train_end") != train_end:
        raise ValueError(
            f"the probe in {fit_file.parent} was fitted for the cut {fit.get('train_end')} (fold {fit.get('fold')}), "
            f"this run's is {train_end} (KP_TRAIN_END / KP_FOLDS): {_rematerialize(policy)}"
        )
    if fit["features_sha256"] != file_sha256(features_path(settings, policy.variant)):
        raise ValueError(
            f"the probe of {policy} was fitted on another features file than "
            f"{features_path(settings, policy.variant)}: {_rematerialize(policy)}"
        )
    try:
        if fit["learner"] == "lr":
            model: ProbeModel = LinearProbeModel.from_bytes(data)
        else:
            model = TreeProbeModel.from_bytes(data, fit["classes"], settings.evaluate.probe_threads)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same one line naming the file
        raise ValueError(
            f"{model_file} cannot be read as a probe ({type(exc).__name__}: {exc}): {_rematerialize(policy)}"
        ) from None
    return model, fit


def probe_probabilities(probe: tuple[ProbeModel, dict], frame: pl.DataFrame) -> np.ndarray:
    """A loaded probe's (``load_probe``) softmax [n, 3] (Buy, Sell, Hold) on the rows of ``frame``."""
    model, fit = probe
    x = _standardize(_matrix(frame, tuple(fit["features"])), np.asarray(fit["mean"]), np.asarray(fit["std"]))
    if x.shape[0] == 0:
        return np.empty((0, 3))
    return _classes3(model, model.predict_proba(x))


def rule_actions(variant: str, frame: pl.DataFrame, tau: float) -> np.ndarray:
    """The actions of a rule on the rows of ``frame`` (ret1, ret20)."""
    spec = lookup_variant(variant)
    if spec.family != "rule":
        raise ValueError(f"{variant} is not a rule")
    if spec.features is None:  # always Hold
        return np.full(frame.height, HOLD, dtype=np.int8)
    r = frame[spec.features].fill_null(float("nan")).to_numpy().astype(np.float64)
    return np.where(r > tau, BUY, np.where(r < -tau, SELL, HOLD)).astype(np.int8)


def baseline_probabilities(policy: Policy, frame: pl.DataFrame, probe: tuple[object, dict] | None) -> np.ndarray:
    """[n, 3] probabilities of a probe (loaded: ``load_probe``), or the one-hot action of a rule (no probe)."""
    if lookup_variant(policy.variant).family == "probe":
        return probe_probabilities(probe, frame)
    return np.eye(3)[rule_actions(policy.variant, frame, policy.tau)]


def baseline_predictions(
    settings: Settings, policy: Policy, split: str, tickers: list[str] | None, probe: tuple[object, dict] | None = None
) -> pl.DataFrame:
    """PREDICTIONS_SCHEMA rows of ``split`` (``test`` or ``validation``) of the features file, for ``tickers``
    (None: every ticker), sorted by ticker and date. The action is the argmax of the softmax (the paper's
    weighted argmax, as the models'), the rule's own action for a rule."""
    from kinematic_pipeline.backtest.sweep import predictions_frame

    label = tau_column(policy.tau)
    frame = read_features(settings, policy.variant, (split,), ("close", label), policy.fold)
    if tickers is not None:
        frame = frame.filter(pl.col("ticker").is_in(tickers))
    frame = frame.sort("ticker", "date")
    if probe is None and lookup_variant(policy.variant).family == "probe":
        probe = load_probe(settings, policy)
    probs = baseline_probabilities(policy, frame, probe)
    return predictions_frame(frame, (policy.variant, policy.tau, policy.seed), probs, label)
