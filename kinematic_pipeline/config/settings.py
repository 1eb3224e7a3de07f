"""The configuration's frozen dataclasses: ``Settings`` and one section per concern of the pipeline.

Every default carries a comment; the named profiles (``profiles.py``) and the environment (``environment.py``)
only replace values. Enum-like fields are checked when a config is built: a typo is a ValueError naming the
field and its choices. Nothing here imports dagster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from dataclasses import dataclass, field
from pathlib import Path

from kinematic_pipeline.config.backbones import ModelConfig
from kinematic_pipeline.config.checks import check_alpha, check_choice
from kinematic_pipeline.config.machine import usable_cores
from kinematic_pipeline.folds import Fold, walk_forward
from kinematic_pipeline.paper_conventions import BacktestConfig
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.tasks.registry import check_families, run_tasks
from kinematic_pipeline.tasks.targets import LABEL_SOURCES
from kinematic_pipeline.tokenizations import chosen
from kinematic_pipeline.variants import BASELINE_NAMES, VARIANT_NAMES, variant
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.windows import N_KNOTS

SOURCES = ("synthetic", "parquet", "csv", "yfinance")
HL_POLICIES = ("quarantine", "flag")
ALPHA_MLE_SCOPES = ("corpus", "ticker")
TIME_UNITS = ("session", "calendar")
FOLD_PERIODS = ("year", "half", "quarter")
TAU_SWEEP_FOLDS = ("all", "last", "none")
TAU_SWEEP_SEEDS = ("all", "first")
SCHEDULES, COMPILES = ("wsd", "cosine"), ("none", "regional")  # train.schedule (modules.LRSchedule), train.compile
# the skill intervals' block, in trading days: long enough to keep the scores' autocorrelation (volatility clusters),
# short enough to leave a test period of a few hundred days many blocks
SKILL_BLOCK_DAYS_RANGE = (20, 60)


SYNTHETIC_TICKER = "SYN{:03d}"  # the synthetic source's k-th ticker (sources/synthetic.py draws one series per name)


@dataclass(frozen=True)
class SyntheticConfig:
    """The embedded default universe: a seeded latent-kinematics generator (see sources/synthetic.py)."""

    n_tickers: int = 8  # names in the universe
    seed: int = 20240917  # one seed for the whole universe; each ticker derives its own stream
    late_listing_fraction: float = 0.25  # share of tickers that list after the first day (IPOs)
    zero_volume_prob: float = 2e-4  # chance a bar reports zero volume (a missing measurement)
    measurement_noise: tuple[float, float] = (0.002, 0.008)  # range of per-ticker noise std of ln(close)
    # Positive controls in place of the latent kinematics (sources/synthetic.py): KP_PLANTED_IC, a drift whose oracle
    # daily IC is that number in [0, 1); KP_PLANTED_VOL=1 (planted_vol), a log-AR(1) variance and its exact forecast.
    planted_ic: float | None = None
    planted_persistence: float = 0.99  # AR(1) coefficient of the planted drift (half-life ~69 sessions)
    planted_vol: bool = False


@dataclass(frozen=True)
class DataConfig:
    """Where the bars come from and which history the trading-day partitions cover."""

    source: str = "synthetic"  # synthetic | parquet | csv | yfinance
    source_path: str | None = None  # file or directory for parquet/csv
    start_date: dt.date = dt.date(2021, 1, 4)  # first trading-day partition
    end_date: dt.date | None = dt.date(2022, 12, 30)  # last partition to load (None: the source's last day)
    tickers: tuple[str, ...] | None = None  # restrict the universe (None: every ticker the source has)


@dataclass(frozen=True)
class SplitConfig:
    """How the history splits into training and test days: the cut and the walk-forward folds after it
    (``folds.walk_forward`` reads this section, with the history's first day).

    folds = 1 is the single cut ``train_end`` (test: every later session); n > 1 are the n consecutive periods
    (``fold_period``) after ``train_end``, each tested by policies trained on the sessions before it, less an
    embargo of ``embargo_sessions`` (at least a window's ``N_KNOTS``) between the training and test days; the
    training days whose target reads into a test period (the run's tasks' ``Task.horizon``) are purged."""

    train_end: dt.date = dt.date(2021, 12, 31)  # last day of the training period (paper: 2022-12-31)
    folds: int = 1
    fold_period: str = "year"  # year | half | quarter
    # a window: it spans N_KNOTS sessions (its day and the LOOKBACK = 64 before it). N_KNOTS, not LOOKBACK: the
    # last training day's label reads the next session's close, so with N_KNOTS sessions between the training and
    # test days no session read for training (a window or its label) is in the first test day's window
    embargo_sessions: int = N_KNOTS
    tau_sweep_folds: str = "all"  # "last": taus other than report_tau on the last fold only; "none": report_tau only
    tau_sweep_seeds: str = "all"  # "first": taus other than report_tau are trained with the first seed only

    def __post_init__(self) -> None:
        check_choice("split.fold_period", self.fold_period, FOLD_PERIODS)
        check_choice("split.tau_sweep_folds", self.tau_sweep_folds, TAU_SWEEP_FOLDS)
        check_choice("split.tau_sweep_seeds", self.tau_sweep_seeds, TAU_SWEEP_SEEDS)
        if self.folds < 1 or self.embargo_sessions < N_KNOTS:
            raise ValueError(
                f"split.folds={self.folds}, embargo_sessions={self.embargo_sessions}: expected folds >= 1, "
                f"embargo >= {N_KNOTS} (a window)"
            )


@dataclass(frozen=True)
class IngestConfig:
    """The raw_ohlcv data contract (DESIGN.md)."""

    # Adjusted prices carry rounding noise (~2e-6 relative on the real file): only a high/low outside open/close
    hl_rel_tolerance: float = 1e-6  # by more than this is an inconsistency
    # "quarantine": high/low-inconsistent rows go to the quarantine (the contract's default);
    # "flag": they are kept with hl_inconsistent = true (their close and volume are still usable).
    hl_policy: str = "quarantine"
    # Per-partition observations (metadata per trading day in the UI) only for runs this small;
    # larger backfills record per-partition facts in the manifest table instead.
    max_partitions_observed: int = 31

    def __post_init__(self) -> None:
        check_choice("ingest.hl_policy", self.hl_policy, HL_POLICIES)


@dataclass(frozen=True)
class TokenizeConfig:
    """Spline enrichment (DESIGN.md): smoothing, time unit, window admission, labels."""

    alpha_price: float | str = 5.0  # paper eq. (1): alpha = 5 (trading days); or "mle" (alpha_estimates)
    alpha_volume: float | str = 5.0  # paper eq. (2), separately configurable; or "mle"
    alpha_mle_scope: str = "corpus"  # "corpus": one pooled estimate; "ticker": one per ticker (corpus fallback)
    time_unit: str = "session"  # "session": t_k = k; "calendar": calendar days x 252/365.25 (mean step ~1)
    max_missing_price: int = 4  # a window is admitted with at most this many missing closes of its 65
    min_valid_volume: int = 32  # ... and at least this many valid (non-zero) volumes of its 64
    label_source: str = "spline"  # "spline": paper's end-of-window spline positions; "close": close-to-close
    taus: tuple[float, ...] = (0.0025, 0.005, 0.01, 0.02)  # Buy/Sell thresholds on the next-day log return
    block_days: int = 256  # trading days tokenized per batch (bounds memory on long backfills)
    write_threads: int = 2  # Parquet shards compressed and written in parallel
    tokenizations: tuple[str, ...] = ("spline", "fd", "raw")  # those the run computes (tokenizations.chosen)
    tasks: tuple[str, ...] = ("bsh",)  # the task families the labels hold and the run fine-tunes (tasks.registry)
    vol_horizons: tuple[int, ...] = (
        5,
        1,
    )  # sessions of the volatility task's targets (tasks.volatility), reported first

    def __post_init__(self) -> None:
        chosen(self.tokenizations)  # registered names, spline among them
        check_families(self.tasks)
        if not self.vol_horizons or len(set(self.vol_horizons)) != len(self.vol_horizons):
            raise ValueError(f"tokenize.vol_horizons={self.vol_horizons!r}: expected distinct whole numbers >= 1")
        check_alpha("tokenize.alpha_price", self.alpha_price)
        check_alpha("tokenize.alpha_volume", self.alpha_volume)
        check_choice("tokenize.alpha_mle_scope", self.alpha_mle_scope, ALPHA_MLE_SCOPES)
        check_choice("tokenize.time_unit", self.time_unit, TIME_UNITS)
        check_choice("tokenize.label_source", self.label_source, LABEL_SOURCES)


@dataclass(frozen=True)
class TrainConfig:
    """Pretraining (paper "Training Stability") and LoRA fine-tuning (paper "Fine-Tuning via LoRA")."""

    # One foundation, adapters and backtests per seed (data order, initialization, dropout): a run's is its Policy's
    seeds: tuple[int, ...] = (1234,)
    # Budgets in optimizer steps (per rank), not epochs (paper: 5 pretraining epochs, ~32k steps of 256; 3 fine-tuning
    # epochs). A run warms up, then anneals to 0 by ``schedule`` (training/modules.LRSchedule): "wsd" holds the peak
    # until ``patience`` validations bring no better loss or the budget's last ``decay_fraction`` begins, then decays
    # linearly to 0 over that fraction and ends; "cosine" decays over the whole budget and stops at the stall. The
    # best state (not the last) is restored and saved.
    schedule: str = "wsd"
    decay_fraction: float = 0.2
    pretrain_steps: int = 30_000
    # (variant, "pretrain" | "finetune", steps): a variant's own budget of a stage (pretraining: from scratch) where it
    # needs another than the profile's (demo: PatchTST's masked patches), each shown by benchmarks/bench_budget.py
    steps_of: tuple[tuple[str, str, int], ...] = ()
    finetune_steps: int = 6_000
    # Rolling warm starts: fold k's foundation continues fold k-1's saved (best) state and AdamW state, same variant and
    # seed, on its own training days for ``warm_start_steps`` (None: pretrain_steps), at ``warm_start_rate`` of ``lr``
    # with no warmup (None: a fresh optimizer warmed up to the peak, the ci profile's golden numbers). The first fold
    # trains from scratch. It records its parent (``parent.json``), refused once that changes (model_pins.check_parent).
    warm_start: bool = True  # False: every fold from scratch (KP_WARM_START=0)
    warm_start_steps: int | None = None
    warm_start_rate: float | None = 0.2
    warmup_fraction: float = 0.05  # of the budget, linear from 0 to the learning rate
    eval_every: int = 250  # optimizer steps between validations (and points of the learning curves)
    patience: int = 8  # validations without a better loss before the decay starts (cosine: stops; 0: never)
    lr: float = 6e-4
    weight_decay: float = 0.1  # AdamW, on matrices only
    grad_clip: float = 1.0  # gradient norm clipping
    batch_size: int = 256
    val_fraction: float = 0.1  # the last 10% of training-period days validate (split by date)
    # an epoch is a uniform sample of this many training windows (None: every window once, shuffled); a budget
    # longer than an epoch draws the next epoch's sample
    max_windows_per_epoch: int | None = None
    finetune_max_windows_per_epoch: int | None = None  # fine-tuning's cap (None: max_windows_per_epoch)
    # fine-tuning's epochs from a fixed seeded sample of this many labelled windows (the scaling curves': n is data)
    finetune_windows: int | None = None
    max_val_windows: int | None = 20_000  # validation windows at most (one sample a fold, every seed's; None: all)
    # Runs ``materialize`` runs at once (KP_TRAIN_SIDE_BY_SIDE; orchestration/side_by_side.py), each at process_threads.
    # None (demo, real): one a core at one thread; 1 (ci: golden numbers at every core; paper: one accelerator)
    side_by_side: int | None = 1
    # "regional" (KP_TRAIN_COMPILE): a pretraining run of >= compile_min_steps compiles each repeated block (one
    # Inductor cache in the warehouse, shared by the run's processes); 1.18x a step at real's size, paid after ~215
    compile: str = "none"
    compile_min_steps: int = 400
    threads: int | None = None  # torch's intra-op threads in a training step (None: one per usable core)
    accelerator: str = "auto"  # "auto" uses a GPU (and DDP over several) when present
    devices: str = "auto"
    precision: str = "32-true"  # e.g. "bf16-mixed" on a GPU
    # "auto": one device as Lightning picks it, and "ddp_spawn" when several GPUs are visible (inside a
    # Dagster step Lightning's default "ddp" launcher would re-run Dagster's own command line per rank)
    strategy: str = "auto"
    finetune_lr: float = 1e-3  # LoRA's adapters (the paper's 3e-4 cannot move a head in a CPU budget)
    head_lr: float = 3e-3  # the classification head (and PatchTST's linear probe): its own, larger rate
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    lora_layers: tuple[int, ...] = (0, 1, 3)  # the paper's layers 1, 2 and 4 (0-based)
    class_weights: tuple[float, float, float] = (2.0, 10.0, 1.0)  # weighted CE for [Buy, Sell, Hold]
    # the models trained and evaluated, in this order (Settings.evaluated_variants'; variants.VARIANT_NAMES: registry's)
    variants: tuple[str, ...] = ("splinegpt", "rawgpt_fd", "rawgpt", "patchtst")
    shard_trace: str | None = None  # KP_TRAIN_SHARD_TRACE: a folder where each rank records what it served

    def steps_for(self, variant: str, stage: str) -> int:
        """``variant``'s budget of ``stage`` ("pretrain": from scratch; "finetune"): its own (``steps_of``), else
        ``pretrain_steps`` or ``finetune_steps``."""
        return {(v, s): n for v, s, n in self.steps_of}.get((variant, stage), getattr(self, f"{stage}_steps"))

    @property
    def processes(self) -> int:
        """How many runs ``materialize`` runs at once: ``side_by_side``, else one per usable core."""
        return self.side_by_side or usable_cores()

    @property
    def process_threads(self) -> int:
        """The threads of one process that computes (a training step, a probe): ``threads``, else the usable cores
        shared between the ``processes`` at once (never more: 2 cores are easy to oversubscribe; 1 with None)."""
        return self.threads or max(1, usable_cores() // self.processes)

    def __post_init__(self) -> None:
        for name in self.variants:
            check_choice("train.variants", name, VARIANT_NAMES)
        for name, stage, steps in self.steps_of:
            check_choice("train.steps_of", name, VARIANT_NAMES)
            check_choice("train.steps_of", stage, ("pretrain", "finetune"))
            if steps < 1:
                raise ValueError(f"train.steps_of: {name} {stage} {steps!r}: expected a positive number of steps")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"train.seeds={self.seeds!r}: expected distinct integers, at least one")
        for name in ("pretrain_steps", "finetune_steps", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name}={getattr(self, name)!r}: expected a positive number of steps")
        if self.finetune_windows is not None and self.finetune_windows < 1:
            raise ValueError(f"train.finetune_windows={self.finetune_windows!r}: expected a positive window count")
        if self.warm_start_steps is not None and self.warm_start_steps < 1:
            raise ValueError(
                f"train.warm_start_steps={self.warm_start_steps!r}: expected a positive number of steps (None: "
                "train.pretrain_steps)"
            )
        check_choice("train.schedule", self.schedule, SCHEDULES)
        check_choice("train.compile", self.compile, COMPILES)
        if self.warm_start_rate is not None and not 0.0 < self.warm_start_rate <= 1.0:
            raise ValueError(f"train.warm_start_rate={self.warm_start_rate}: expected a fraction of lr in (0, 1]")
        if self.patience < 0 or not 0.0 <= self.warmup_fraction < 1.0 or not 0.0 < self.decay_fraction <= 1.0:
            raise ValueError(
                f"train.patience={self.patience}, train.warmup_fraction={self.warmup_fraction}, train.decay_fraction="
                f"{self.decay_fraction}: expected patience >= 0, a warmup fraction in [0, 1), a decay fraction in (0, 1]"
            )


@dataclass(frozen=True)
class EvalConfig:
    """Predictions, backtests and the report (paper section "Experimental Validation")."""

    # Backtested names; None: the first six tickers of the universe that have a test-period window.
    test_tickers: tuple[str, ...] | None = None
    # costs, account, tax, rf and the Sharpe's bootstrap, passed whole to the engine (the paper's by default)
    backtest: BacktestConfig = field(default_factory=BacktestConfig)
    # The paper's tables print a Sharpe and Sortino as N/A below this many days long: in its convention (rf
    # subtracted, cash earning nothing) a nearly flat record has an unbounded Sharpe (-307 for one day in 1,008)
    min_days_in_market: int = 20
    report_tau: float = 0.01  # the paper's standard threshold for its main tables and figures
    report_cost_bps: float = 0.0  # the paper's main tables model no costs (its "Limitations")
    focus_ticker: str | None = None  # sweeps, diagnostics, manifold (paper: NVDA); None: first test ticker
    responsiveness_ticker: str | None = None  # the responsiveness figure (paper: XOM); None: focus ticker
    figure_days: int = 120  # sessions shown in the manifold and responsiveness figures (the test period's last)
    skill_bootstrap_resamples: int = 1000  # resamples of test days behind the skill scores' intervals
    # consecutive test days per resampled block of those intervals (circular blocks, every ticker of a day together):
    # the days' scores are autocorrelated (volatility clusters), and single days gave intervals 2.4-3x too narrow;
    # SKILL_BLOCK_DAYS_RANGE bounds it (issue 38: 20-60 trading days). 50, as the volatility task's: on vol20's skill
    # 60-day blocks gave intervals 1.3x the 20-day ones (science-6 L-D); a short test period cuts it to a quarter of
    # its days (``skill.effective_block_days``)
    skill_bootstrap_block_days: int = 50
    predict_batch_size: int = 128  # windows per forward pass (512 ran 0.7x as fast on one thread: cache)
    # The simple baselines evaluated beside the models (variants.BASELINES: rules and probes), and their taus
    # (None: every tokenize.taus); they go through the same predictions, backtests and tables. None: every one whose
    # tokenization the run computes (Settings resolves it: a tokenization registered but not computed adds none).
    baselines: tuple[str, ...] | None = None
    baseline_taus: tuple[float, ...] | None = None
    # The universe signal (IC, skill on every ticker-day of the test period, at report_tau): None scores
    # every ticker; a number scores that many tickers (a seeded sample, the test tickers always in), the
    # same rows for every variant, when the models' forward passes would not fit the budget.
    universe_tickers: int | None = None
    universe_seed: int = 0
    # A CSV of index members and the day each joined (``sources/membership.py``): each fold's universe keeps the
    # names added on or before its first test day (KP_MEMBERSHIP_FILE). None: every ticker the source holds.
    membership_file: str | None = None
    probe_lr_max_iter: int = 300  # lbfgs iterations of the logistic regressions
    probe_trees: int = 300  # LightGBM boosting rounds at most (early stopping on the validation days)
    probe_max_train_rows: int | None = None  # a probe fits on a seeded sample of this many training rows at most
    # LightGBM threads, at most a side-by-side process's share (Settings.probe_threads): its result is deterministic
    # for a fixed thread count
    probe_threads: int = 2
    verdict_cost_bps: float = 10.0  # the cost of the verdict's tests ("after costs"); one of costs_bps
    verdict_bootstrap_resamples: int = 1000  # SPA, StepM, MCS and the Sharpe-difference intervals
    verdict_seed: int = 0
    # The data-scaling curves (stages/scaling.py; asset scaling_curves, group scaling): on the first fold and seed
    # at report_tau, SplineGPT and RawGPT-FD fine-tuned from their foundations on each of these numbers of training
    # windows (budgets of ceil(n / train.batch_size) steps), beside logistic regressions fitted on as many rows.
    # scaling_in_dag: whether the whole-DAG materialize runs it (otherwise only `--select scaling_curves`).
    scaling_windows: tuple[int, ...] = (4096, 16384, 65536, 262144)
    scaling_in_dag: bool = False

    def __post_init__(self) -> None:
        low, high = SKILL_BLOCK_DAYS_RANGE
        if not low <= int(self.skill_bootstrap_block_days) <= high:
            raise ValueError(
                f"evaluate.skill_bootstrap_block_days={self.skill_bootstrap_block_days}: expected {low}-{high} "
                "trading days (shorter blocks break the days' autocorrelation and narrow the skill intervals)"
            )
        if not self.scaling_windows or any(int(n) < 1 for n in self.scaling_windows):
            raise ValueError(f"evaluate.scaling_windows={self.scaling_windows!r}: expected positive window counts")
        for name in self.baselines or ():
            check_choice("evaluate.baselines", name, BASELINE_NAMES)
        if self.verdict_cost_bps not in self.backtest.costs_bps:
            raise ValueError(
                f"evaluate.verdict_cost_bps={self.verdict_cost_bps} is not one of backtest.costs_bps "
                f"{self.backtest.costs_bps}"
            )


@dataclass(frozen=True)
class Settings:
    """Everything a stage needs, resolved once per process."""

    profile: str = "ci"
    # the layout of $KP_WAREHOUSE (a path given here becomes a Warehouse; it reads as its root path)
    warehouse: Warehouse = field(default=Path("warehouse"))
    durable_writes: bool = False  # KP_DURABLE_WRITES=1: fsync every file before its rename (power loss)
    drop_dir: Path | None = None  # KP_DROP_DIR: what the drop_directory sensor watches (None: $KP_WAREHOUSE/drop)
    data: DataConfig = field(default_factory=DataConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        root = self.warehouse.root if isinstance(self.warehouse, Warehouse) else Path(self.warehouse)
        object.__setattr__(self, "warehouse", Warehouse(root, durable=self.durable_writes))
        if self.evaluate.membership_file is not None:  # checked as the settings load, not when a universe is built
            from kinematic_pipeline.sources.membership import check_membership

            check_membership(self.evaluate.membership_file, self._known_tickers(), f"the {self.data.source} source")
        if self.evaluate.baselines is None:  # every baseline whose tokenization the run computes
            computed = chosen(self.tokenize.tokenizations)
            baselines = tuple(n for n in BASELINE_NAMES if variant(n).tokenization in computed)
            object.__setattr__(self, "evaluate", dataclasses.replace(self.evaluate, baselines=baselines))
        chosen(self.tokenize.tokenizations, {n: variant(n).tokenization for n in self.evaluated_variants})

    def _known_tickers(self) -> tuple[str, ...] | None:
        """The source's tickers when known without reading its bars (``data.tickers``, the synthetic source's names,
        a Parquet or CSV source's ticker column); None otherwise (the membership file is then matched where the
        universe is built)."""
        if self.data.tickers is not None:
            return tuple(self.data.tickers)
        if self.data.source == "synthetic":
            return tuple(SYNTHETIC_TICKER.format(k) for k in range(self.synthetic.n_tickers))
        if self.data.source in ("parquet", "csv") and self.data.source_path:
            from kinematic_pipeline.sources.files import source_tickers

            return source_tickers(self.data.source_path, self.data.source)
        return None

    @property
    def drop_directory(self) -> Path:
        """What the drop_directory sensor watches: KP_DROP_DIR, else ``$KP_WAREHOUSE/drop``."""
        return self.drop_dir if self.drop_dir is not None else self.warehouse.root / "drop"

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The run's fine-tuning tasks: those of each family of ``tokenize.tasks`` (``tasks.registry.run_tasks``;
        Buy/Sell/Hold at each ``tokenize.taus``, with the class weights it trains with). Their horizons set the folds' purge
        (``folds.walk_forward``) and how far ahead the labels read (``label_horizon``)."""
        return run_tasks(self)

    @property
    def label_horizon(self) -> int:
        """Sessions after day t the labels of day t read: the longest ``Task.horizon`` of the run's tasks (the
        labels' inputs, the nightly plan, the folds' purge)."""
        return max(task.horizon for task in self.tasks)

    @functools.cached_property
    def folds(self) -> tuple[Fold, ...]:
        """The run's walk-forward folds (``folds.walk_forward``), in time order: built on first use, then kept
        (the settings are frozen, so they cannot change)."""
        return walk_forward(self)

    @property
    def probe_threads(self) -> int:
        """LightGBM's threads: ``evaluate.probe_threads``, at most a process's share of the cores
        (``train.process_threads``). Two probes at two threads each on 2 cores (side by side) fitted 3-5x slower
        than one: OpenMP's threads spin while they wait (docs/results/2026-11-28.md)."""
        return min(self.evaluate.probe_threads, self.train.process_threads)

    @property
    def evaluated_variants(self) -> tuple[str, ...]:
        """The models, then the baselines (``evaluate.baselines``): every variant with evaluation assets, the
        variants the report shows."""
        return (*self.train.variants, *self.evaluate.baselines)
