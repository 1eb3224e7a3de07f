"""The model variants (paper "Tokenization Ablations and External Baseline"), the simple baselines beside
them.

One registry says, for each variant, which tokenization it reads (``tokenizations/``), which channels of the
token shard feed it, which backbone and head it trains, which files its fine-tuned head is saved in, what its assets
are named and how the report names and draws it. A variant is of one ``family``:

- ``model``: a transformer pretrained and fine-tuned on one tokenization (the paper's four);
- ``probe``: a scikit-learn multinomial logistic regression (``lr``) or a LightGBM tree model (``lightgbm``)
  fitted on the fold's labelled training ticker-days of the universe (a seeded sample of at most
  ``evaluate.probe_max_train_rows``; the rows and LightGBM leaf size used are in its ``fit.json``), on the
  decision-time features of one feature set
  (``Tokenization.features``: a tokenization's last five tokens and window std, or the raw tokens' trivial pair);
- ``rule``: a fixed rule fitted on nothing (always Hold; the sign of the last 1-day or 20-day return).

Probes and rules go through the same predictions, backtests and tables as the models. Everything else (training,
evaluation, assets, report) looks a variant up here; the torch behaviour of a backbone or head kind lives in ``models``
(``build_model``, ``models.heads.HEADS``), keyed by the names here. No dagster and no torch here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kinematic_pipeline.tasks.actions import BUY, HOLD, SELL
from kinematic_pipeline.tokenizations import FD, RAW, SPLINE, TOKENIZATIONS, Tokenization, of_feature_set

# A variant's own assets, each <variant>_<kind> (``Variant.asset``): a model's foundation and adapter, a probe's fit,
# every variant's predictions and backtests (the margin rule's too), and the multi-asset that backtests them.
ASSET_KINDS = ("foundation", "adapter", "probe", "predictions", "backtests", "margin_backtests", "backtesting")


@dataclass(frozen=True)
class HeadLayout:
    """Where a head kind saves a fine-tuned head in an adapter folder (its torch side: ``models.heads``)."""

    kind: str  # "lora": PEFT LoRA + classification head; "probe": a linear probe on the frozen backbone
    path_name: str  # the file or folder under the adapter folder
    is_folder: bool  # PEFT writes a folder; the probe one file
    marker: str | None  # inside a folder: the file written last but one, present when the save completed
    description: str

    def path(self, adapter_dir: Path) -> Path:
        return Path(adapter_dir) / self.path_name

    def saved(self, adapter_dir: Path) -> bool:
        """Whether a fine-tuned head was saved in ``adapter_dir``."""
        path = self.path(adapter_dir)
        return (path / self.marker).is_file() if self.is_folder else path.is_file()

    def files(self, adapter_dir: Path) -> list[Path]:
        """The files under the head's path, sorted (the warehouse leaves out its own records among them:
        ``warehouse.verified.without_sidecars``)."""
        path = self.path(adapter_dir)
        if not self.is_folder:
            return [path]
        return sorted(p for p in path.rglob("*") if p.is_file())


LORA_HEAD = HeadLayout("lora", "adapter", True, "adapter_config.json", "PEFT LoRA on layers 1, 2 and 4")
PROBE_HEAD = HeadLayout("probe", "head.pt", False, None, "linear probe on the frozen backbone")


@dataclass(frozen=True)
class Variant(ABC):
    """What every variant has: the tokenization it reads, its assets' names and how the report names and draws it.
    Its family's behaviour is its class (``ModelVariant``, ``ProbeVariant``, ``RuleVariant``): what its predictions read
    (``inputs``), which files make them (``model_files``), what data it has seen (``data_seen``); its predictor
    (``predictors.families.predictor``: one class per family, where torch and the
    stages are) loads, predicts and traces them. Callers ask a variant or its predictor, never which family it is."""

    name: str
    tokenization: Tokenization  # the tokens it pretrains, fine-tunes and predicts on (baselines: their features')
    display_name: str  # the paper's name (table headers)
    short_name: str  # the paper's column abbreviation
    title: str  # one line for asset descriptions
    color: str  # in every figure (the paper: SplineGPT blue, PatchTST red)
    line_style: str  # thin baseline lines in the equity panel ("-": the focus, drawn thick)

    family: ClassVar[str]  # model | probe | rule (the module docstring): a name for tables and ``predictors.families``
    made_by: ClassVar[str]  # what makes its predictions, for asset descriptions
    seeded: ClassVar[bool] = False  # trained once per ``train.seeds``; else once, under seed 0 (``Policy``)
    every_tau: ClassVar[bool] = False  # a policy per ``tokenize.taus`` (baselines: ``evaluate.baseline_taus``)
    any_target: ClassVar[bool] = False  # fits a task of any target (a fine-tuned head); else classes only
    probabilistic: ClassVar[bool] = True  # states probabilities (a rule decides: its "probabilities" are one-hot)
    compute_kind: ClassVar[str] = "python"  # the Dagster kind of its evaluation assets
    group: ClassVar[str] = "baselines"  # the Dagster group of its evaluation assets

    @property
    def token_asset(self) -> str:
        """Its tokenization's token asset (``spline_tokens``)."""
        return self.tokenization.tokens_asset

    def asset(self, kind: str) -> str:
        """The name of its ``kind`` asset (``ASSET_KINDS``): ``splinegpt_adapter``."""
        if kind not in ASSET_KINDS:
            raise ValueError(f"unknown asset kind {kind!r}: expected one of {', '.join(ASSET_KINDS)}")
        return f"{self.name}_{kind}"

    @abstractmethod
    def inputs(self) -> tuple[tuple[str, bool], ...]:
        """What its predictions read: (asset, over every day) pairs; an asset not read over every day is its own
        partition's or an unpartitioned one."""

    def model_files(self, wh, policy) -> list[Path]:
        """The files in the warehouse ``wh`` that decide ``policy``'s predictions (a rule: none); a
        FileNotFoundError naming the asset to materialize when they are not there."""
        return []

    def training_record(self, wh, policy) -> tuple[Path, str, str] | None:
        """(the file that records how ``policy``'s model was trained, among them its class weights; the asset
        that writes it; how it was trained) in the warehouse ``wh``; None for a rule, trained on nothing."""
        return None

    def data_seen(self, folds, fold_split) -> str:
        """The dates its fit, validation and normalization saw in each of ``folds``, for the contamination column
        (``fold_split(fold)``: the fold's own (fit days, validation days))."""
        parts = []
        for fold in folds:
            fit_days, val = fold_split(fold)
            span = f"fit {fit_days[0]} .. {fit_days[-1]}" if fit_days else "fit: none"
            val_text = f"validation {val[0]} .. {val[-1]}" if val else "no validation"
            name = "" if fold.name is None else f"fold {fold.name}: "
            norm = self.normalization(fold.train_end)
            parts.append(f"{name}{span}; {val_text}; labels <= {fold.label_end}; normalization: {norm}")
        return " / ".join(parts)

    def normalization(self, train_end) -> str:
        """How its inputs are normalized, for the contamination column (``train_end``: the fold's)."""
        return "none"


@dataclass(frozen=True)
class ModelVariant(Variant):
    """A transformer pretrained and fine-tuned on one tokenization (the paper's four)."""

    # Channels of the [64, 9] token window the backbone reads; None: all nine, anchored and z-scored with
    # the tokenization's corpus statistics. PatchTST reads raw_tokens' ln close and ln volume, unnormalized.
    channels: tuple[int, ...] | None
    backbone: str  # "gpt": KinematicGPT; "patchtst": PatchTST (models.build_model)
    head: HeadLayout  # how its fine-tuned head is saved (its torch side: models.heads.HEADS)

    family: ClassVar[str] = "model"
    made_by: ClassVar[str] = "fine-tuned policy"
    seeded: ClassVar[bool] = True
    every_tau: ClassVar[bool] = True
    any_target: ClassVar[bool] = True
    compute_kind: ClassVar[str] = "pytorch"
    group: ClassVar[str] = "evaluate"

    @property
    def normalized(self) -> bool:
        """Whether its windows are anchored and z-scored with corpus statistics."""
        return self.channels is None

    def inputs(self) -> tuple[tuple[str, bool], ...]:
        from kinematic_pipeline.warehouse.layout import LABELS, RAW_OHLCV

        stats = ((self.tokenization.corpus_stats_asset, False),) if self.normalized else ()
        return (self.asset("adapter"), False), (self.token_asset, True), *stats, (LABELS, True), (RAW_OHLCV, True)

    def model_files(self, wh, policy) -> list[Path]:
        # the adapter's pin too: it records the foundation and the class weights its probabilities carry
        return [wh.foundation_checkpoint(policy), *wh.adapter_files(policy), wh.adapter_pin(policy)]

    def normalization(self, train_end) -> str:
        return f"corpus statistics to {train_end}" if self.normalized else "RevIN (each window itself)"

    def training_record(self, wh, policy) -> tuple[Path, str, str] | None:
        return wh.adapter_pin(policy), self.asset("adapter"), "fine-tuned"


@dataclass(frozen=True)
class _FeaturesVariant(Variant):
    """A baseline that decides on the rows of its tokenization's features file: its ``feature_set`` there."""

    feature_set: ClassVar[str]  # the columns it reads (``Tokenization.feature_sets``)

    @property
    def features_asset(self) -> str:
        return self.tokenization.features_asset


@dataclass(frozen=True)
class ProbeVariant(_FeaturesVariant):
    """A logistic regression or LightGBM probe fitted on one feature set's decision-time features."""

    feature_set: str  # FEATURE_SETS: one of its tokenization's feature_sets
    learner: str  # "lr" (scikit-learn) or "lightgbm": stages.probe_learners.LEARNERS

    family: ClassVar[str] = "probe"
    made_by: ClassVar[str] = "fitted probe"

    @property
    def feature_columns(self) -> tuple[str, ...]:
        """The columns of its features file it decides on."""
        return self.tokenization.feature_sets[self.feature_set]

    def inputs(self) -> tuple[tuple[str, bool], ...]:
        return (self.asset("probe"), False), (self.features_asset, False)

    def model_files(self, wh, policy) -> list[Path]:
        return wh.probe_files(policy)

    def normalization(self, train_end) -> str:
        return "z-scores of the fit rows"

    def training_record(self, wh, policy) -> tuple[Path, str, str] | None:
        return wh.probe_fit(policy), self.asset("probe"), "fitted"


@dataclass(frozen=True)
class RuleVariant(_FeaturesVariant):
    """A fixed rule fitted on nothing: always Hold, or the sign of the last return it ``follows``."""

    follows: str | None  # the return column whose sign it follows (None: always Hold)

    family: ClassVar[str] = "rule"
    made_by: ClassVar[str] = "rule"
    probabilistic: ClassVar[bool] = False

    feature_set: ClassVar[str] = RAW.name  # ret1 and ret20 are columns of the raw features file
    feature_columns: ClassVar[tuple[str, ...]] = ("ret1", "ret20")

    def inputs(self) -> tuple[tuple[str, bool], ...]:
        return ((self.features_asset, False),)

    def data_seen(self, folds, fold_split) -> str:
        return "nothing: a fixed rule (tau only)"

    def actions(self, frame, tau: float):
        """Its actions (int8 codes) on the rows of ``frame`` (columns ret1, ret20): Buy after a return above
        ``tau``, Sell after one below -``tau``, else Hold."""
        import numpy as np

        if self.follows is None:  # always Hold
            return np.full(frame.height, HOLD, dtype=np.int8)
        r = frame[self.follows].fill_null(float("nan")).to_numpy().astype(np.float64)
        return np.where(r > tau, BUY, np.where(r < -tau, SELL, HOLD)).astype(np.int8)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        ModelVariant(
            name="splinegpt",
            tokenization=SPLINE,
            channels=None,
            backbone="gpt",
            head=LORA_HEAD,
            display_name="SplineGPT",
            short_name="Spline",
            title="SplineGPT (continuous spline tokens)",
            color="tab:blue",
            line_style="-",
        ),
        ModelVariant(
            name="patchtst",
            tokenization=RAW,
            channels=(0, 4),
            backbone="patchtst",
            head=PROBE_HEAD,
            display_name="PatchTST",
            short_name="Patch",
            title="PatchTST (channel-independent patches, RevIN, masked-patch pretraining)",
            color="tab:red",
            line_style="--",
        ),
        ModelVariant(
            name="rawgpt_fd",
            tokenization=FD,
            channels=None,
            backbone="gpt",
            head=LORA_HEAD,
            display_name="RawGPT-FD",
            short_name="FD",
            title="RawGPT-FD (finite-difference tokens, same backbone)",
            color="tab:orange",
            line_style=":",
        ),
        ModelVariant(
            name="rawgpt",
            tokenization=RAW,
            channels=None,
            backbone="gpt",
            head=LORA_HEAD,
            display_name="RawGPT",
            short_name="Raw",
            title="RawGPT (raw values and first differences, same backbone)",
            color="tab:purple",
            line_style="-.",
        ),
    )
}  # in the paper's column order
VARIANT_NAMES = tuple(VARIANTS)  # the paper's models: the columns of its tables
FAMILIES = ("model", "probe", "rule")
FEATURE_SETS = tuple(f for t in TOKENIZATIONS.values() for f in t.feature_sets)  # spline, fd, raw, trivial
RULES = {"always_hold": None, "momentum_1d": "ret1", "momentum_20d": "ret20"}  # rule -> the return it follows
_PROBE_STYLE = {
    "spline": ("tab:cyan", "Spline"),
    "fd": ("tab:olive", "FD"),
    "raw": ("tab:pink", "Raw"),
    "trivial": ("tab:gray", "Trivial"),
}


def _probe(learner: str, features: str) -> ProbeVariant:
    what = (
        "yesterday's return and 20-day realized volatility"
        if features == "trivial"
        else (f"{features} tokens: the last five tokens and each channel's window std")
    )
    long = {"lr": "Logistic regression", "lightgbm": "LightGBM"}[learner]
    short = {"lr": "LR", "lightgbm": "GBM"}[learner]
    color, feature_name = _PROBE_STYLE.get(features, ("tab:gray", features))  # a new tokenization: gray until styled
    return ProbeVariant(
        name=f"{learner}_{features}",
        tokenization=of_feature_set(features),
        display_name=f"{long} ({feature_name})",
        short_name=f"{short}-{feature_name}",
        title=f"{long} probe on {what}, fitted on the fold's training ticker-days (at most probe_max_train_rows)",
        color=color,
        line_style="--" if learner == "lr" else ":",
        feature_set=features,
        learner=learner,
    )


def _rule(name: str, display: str, short: str, title: str, color: str) -> RuleVariant:
    return RuleVariant(
        name=name,
        tokenization=RAW,
        display_name=display,
        short_name=short,
        title=title,
        color=color,
        line_style="-.",
        follows=RULES[name],
    )


BASELINES: dict[str, Variant] = {
    v.name: v
    for v in (
        _rule("always_hold", "Always Hold (cash)", "Cash", "always Hold: never invested (cash)", "tab:brown"),
        _rule(
            "momentum_1d",
            "Momentum (1 day)",
            "Mom1",
            "Buy after a 1-day log return above tau, Sell after one below -tau, else Hold",
            "tab:green",
        ),
        _rule(
            "momentum_20d",
            "Momentum (20 days)",
            "Mom20",
            "Buy after a 20-day log return above tau, Sell after one below -tau, else Hold",
            "darkgreen",
        ),
        *(_probe(learner, f) for learner in ("lr", "lightgbm") for f in FEATURE_SETS),
    )
}
BASELINE_NAMES = tuple(BASELINES)
ALL_VARIANTS: dict[str, Variant] = {**VARIANTS, **BASELINES}
ALL_VARIANT_NAMES = tuple(ALL_VARIANTS)  # models, then rules, then probes: the rows of the evidence tables
ABLATIONS = (  # spline tokens vs finite differences: the matched pairs the verdict tests as one Holm family
    ("splinegpt", "rawgpt_fd"),
    ("splinegpt", "rawgpt"),
    ("lr_spline", "lr_fd"),
    ("lightgbm_spline", "lightgbm_fd"),
)
TRIVIAL_PROBE = "lr_trivial"  # the probe on ret1 and vol20: the verdict regresses its features out (partial IC)
FOCUS_VARIANT = "splinegpt"  # the paper's model: drawn thick, the responsiveness figure, the confusion matrix
BENCHMARK = "buy_and_hold"  # the Buy & Hold rows of the backtests (no tau, seed or model)
BENCHMARK_DISPLAY_NAME, BENCHMARK_SHORT_NAME, BENCHMARK_COLOR = "Buy & Hold", "Mkt", "black"


def variant(name: str) -> Variant:
    """The registered variant ``name``; a ValueError naming the choices otherwise."""
    try:
        return ALL_VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown model variant {name!r}: expected one of {', '.join(ALL_VARIANT_NAMES)}") from None


def models(names) -> list[str]:
    """The models among the variant ``names`` (each a pretrained foundation and its fine-tuned adapters), in order."""
    return [n for n in names if isinstance(variant(n), ModelVariant)]


def probes(names) -> list[str]:
    """The probes among the variant ``names`` (each fitted on a features file), in order."""
    return [n for n in names if isinstance(variant(n), ProbeVariant)]


def trained(names) -> list[str]:
    """The variants among ``names`` that were fitted on training data (the models and the probes; a rule sees
    nothing but tau), in order."""
    return [n for n in names if not isinstance(variant(n), RuleVariant)]


def display_name(name: str) -> str:
    return BENCHMARK_DISPLAY_NAME if name == BENCHMARK else variant(name).display_name


def short_name(name: str) -> str:
    return BENCHMARK_SHORT_NAME if name == BENCHMARK else variant(name).short_name


def color(name: str) -> str:
    return BENCHMARK_COLOR if name == BENCHMARK else variant(name).color
