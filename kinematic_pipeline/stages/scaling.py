"""Would more data help? Test skill and rank IC against the distinct training windows a fine-tuning learned from.

On the first walk-forward fold, the first training seed and the report's tau, each of SplineGPT and RawGPT-FD (those
of ``train.variants``) is fine-tuned from its existing foundation once per size n of ``evaluate.scaling_windows``, on
exactly n distinct labelled training windows (``train.finetune_windows``: a sample fixed by the seed, which every
epoch draws from) under one step cap for every n (the profile's ``train.finetune_steps``, or the steps that serve n
windows once when more; its schedule and early stopping), to its own best validation loss: n is data, never steps.
One more row per variant, at the largest n, runs twice that cap (``TRANSFORMER_LONG``): whether more steps on the
same data would move the point. Each row records
the windows its optimizer was served up to the state it kept (``windows_seen``; the curves' ``windows`` at the best
validation) and the distinct windows among them (``distinct_windows``, the figure's x: exact, from the seeded epoch
samples). Each adapter goes to a scratch folder (``<warehouse>/scaling/<variant>/n=<n>/``), never over the
pipeline's own adapters. Beside each transformer, the logistic-regression probe on its tokens' window features
(``lr_spline`` / ``lr_fd``) is fitted on a seeded sample of n labelled training rows (matched data) and on every
labelled training row (the reference line). Beside them, the trailing-volatility forecaster
(``backtest.volatility_reference``: p from N(0, vol20^2) at tau, nothing fitted): what knowing only each ticker's
recent volatility scores (its rank IC is undefined: its score p_buy - p_sell is 0). Its row is scored on the
ticker-days every learner of the variant scored; each learner's own row carries its log-loss skill beyond it, paired
on exactly the ticker-days that learner scored (those with a vol20), with a block-bootstrap interval
(``policy_frames.skill_beyond_reference_frame``, as the information table's).

Every learner is scored as the report scores the universe: its predictions on the fold's test days over the
universe tickers (``predictors.base.universe_tickers``), calibrated on the fold's validation days exactly as
``materialize_predictions`` does (``Predictor.predictions``, ``predictors/``); the daily
cross-sectional rank IC of s = p_buy - p_sell of the de-weighted p against the next day's close-to-close return
(``r_close`` of the labels shards) with its Newey-West t, and the log-loss skill of p on close-to-close labels
against the fold's training base rates (``evidence.train_base_rates``, ``policy_frames.skill_frame``) with its
bootstrap interval over blocks of ``evaluate.skill_bootstrap_block_days`` test days (the table's
``ci_block_days``). Written: ``reports/tables/scaling_curves.parquet`` (and ``.md``) and
``reports/figures/scaling_curves.png``; the report shows them when they exist. No dagster here.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings, TrainConfig
from kinematic_pipeline.folds import Fold, evaluation_days
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.families import predictor
from kinematic_pipeline.report.markdown import Markdown, embedded_image, markdown_table
from kinematic_pipeline.run_keys import run_task
from kinematic_pipeline.sampling import distinct_served
from kinematic_pipeline.stages.base_rates import CLOSE, train_base_rates
from kinematic_pipeline.stages.baselines import train_probe
from kinematic_pipeline.stages.scaling_scores import VOL_REFERENCE, log_row, score_universe, with_vol20
from kinematic_pipeline.variants import color, display_name
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse.atomic import write_text_atomic

SCALED_MODELS = ("splinegpt", "rawgpt_fd")  # the tokenizations the curves compare
TRANSFORMER, LR_MATCHED, LR_ALL = "transformer", "lr_matched", "lr_all"
TRANSFORMER_LONG = "transformer_2x_steps"  # the largest n again, at twice the step cap
LEARNERS = (TRANSFORMER, TRANSFORMER_LONG, LR_MATCHED, LR_ALL, VOL_REFERENCE)
TABLE_NAME = "scaling_curves"  # reports/tables/<name>.parquet|.md and reports/figures/<name>.png
SCRATCH = "scaling"  # <warehouse>/scaling/<variant>/n=<n>/: the adapters these curves fine-tune
SCALING_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,  # the transformer whose tokens the row is about: splinegpt | rawgpt_fd
    "learner": pl.String,  # transformer | transformer_2x_steps (the largest n at twice the step cap) | lr_matched
    # (the probe on n rows) | lr_all (the probe on every row) | trailing_vol20 (the trailing-volatility reference on
    # the ticker-days every learner of the variant scored; its n_windows, windows_seen, steps: null)
    "model": pl.String,  # the variant that learned: the transformer, or its tokens' probe (lr_spline | lr_fd)
    "n_windows": pl.Int64,  # the distinct training windows asked for (lr_all: every labelled training row)
    "windows_seen": pl.Int64,  # windows served up to the kept state (repeats past an epoch); rows a probe fitted
    # the distinct windows among them (the figure's x): a transformer's exactly, from the seeded epoch samples
    "distinct_windows": pl.Int64,
    "train_rows": pl.Int64,  # distinct labelled training windows the fine-tuning drew from (<= n); a probe's rows
    "steps": pl.Int64,  # optimizer steps run (a probe: L-BFGS iterations)
    "best_step": pl.Int64,  # the step whose state was kept (null for a probe)
    "rank_ic": pl.Float64,  # mean daily cross-sectional rank IC of s = p_buy - p_sell against r_close
    "rank_ic_t_nw": pl.Float64,  # its Newey-West t
    "logloss_skill": pl.Float64,  # 1 - log loss / log loss of the fold's training base rates, close-to-close labels
    "logloss_skill_ci_low": pl.Float64,  # 95% bootstrap interval (blocks of evaluate.skill_bootstrap_block_days days)
    "logloss_skill_ci_high": pl.Float64,
    # logloss_skill minus trailing_vol20's, paired on this row's own ticker-days that have a vol20 (null on the
    # reference's row): what the learner knows beyond recent volatility
    "logloss_skill_beyond_vol20": pl.Float64,
    "logloss_skill_beyond_vol20_ci_low": pl.Float64,  # 95% paired bootstrap interval (blocks of ci_block_days days)
    "logloss_skill_beyond_vol20_ci_high": pl.Float64,
    "beyond_vol20_rows": pl.Int64,  # labelled ticker-days paired with the reference (null on the reference's row)
    "ci_block_days": pl.Int64,  # the intervals' block: evaluate.skill_bootstrap_block_days consecutive test days
    "test_rows": pl.Int64,  # labelled universe ticker-days scored
    "seconds": pl.Float64,  # fitting and scoring
}


@dataclass(frozen=True)
class ScalingSummary:
    frame: pl.DataFrame  # SCALING_SCHEMA
    table_path: Path
    figure_path: Path
    fold: str
    seed: int
    tau: float
    seconds: float

    def metadata(self) -> dict:
        """What the scaling_curves asset shows: the table, the figure and where they are."""
        return {
            "fold": self.fold,
            "seed": self.seed,
            "tau": self.tau,
            "rows": self.frame.height,
            "table": Markdown(markdown_table(self.frame)),
            "plot": Markdown(embedded_image(self.figure_path.read_bytes(), "scaling curves")),
            "table_path": self.table_path,
            "figure_path": self.figure_path,
            "wall_seconds": round(self.seconds, 1),
        }


def scaling_variants(settings: Settings) -> tuple[str, ...]:
    """The transformers the curves are drawn for: SplineGPT and RawGPT-FD, those the run trains."""
    return tuple(v for v in SCALED_MODELS if v in settings.train.variants)


def probe_of(variant: str) -> str:
    """The logistic-regression probe on the window features of ``variant``'s tokens (lr_spline, lr_fd)."""
    return f"lr_{lookup_variant(variant).tokenization.name}"


def scaling_fold(settings: Settings) -> Fold:
    return settings.folds[0]


def scaling_policy(settings: Settings, variant: str) -> Policy:
    """The policy the curves fine-tune: the first fold, the first training seed, the report's tau."""
    task = run_task(settings, settings.evaluate.report_tau)
    return Policy(variant, task, settings.train.seeds[0], scaling_fold(settings))


def scratch_dir(settings: Settings, variant: str, n: int) -> Path:
    return settings.warehouse / SCRATCH / variant / f"n={n}"


def scaling_budget(cfg: TrainConfig, n: int, long: bool = False, variant: str | None = None) -> TrainConfig:
    """``cfg`` fine-tuning on n distinct windows under the step cap (``variant``'s own where it has one:
    ``train.steps_of``), or as many steps as serve n windows once when that is more (science-6 L-A: at the cap the
    largest n was served less than half its windows), twice that when ``long``; its schedule and early stopping as
    every fine-tuning has them."""
    cap = cfg.finetune_steps if variant is None else cfg.steps_for(variant, "finetune")
    steps = max(cap, math.ceil(n / cfg.batch_size)) * (2 if long else 1)
    own = tuple(e for e in cfg.steps_of if e[1] != "finetune")  # ``steps`` is every variant's fine-tuning budget here
    return dataclasses.replace(cfg, finetune_windows=n, finetune_steps=steps, steps_of=own)


def check_foundations(settings: Settings, variants: tuple[str, ...]) -> dict[str, Path]:
    """{variant: its foundation's model.pt} of the scaling policy; FileNotFoundError naming the asset otherwise."""
    out = {}
    for variant in variants:
        policy = scaling_policy(settings, variant)
        path = settings.warehouse.foundation_checkpoint(policy)
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: materialize {variant}_foundation partition {policy.fit_key} (the scaling curves "
                "fine-tune from it)"
            )
        out[variant] = path
    return out


# --- the learners ----------------------------------------------------------------------------------------------


def transformer_row(
    settings: Settings,
    variant: str,
    n: int,
    foundation: Path,
    days: list,
    rates: dict,
    progress: bool = False,
    long: bool = False,
    universe_out: list | None = None,
) -> dict:
    """Fine-tune ``variant`` from ``foundation`` on n distinct windows (``long``: at twice the step cap) into its
    scratch folder and score it; ``universe_out``, when given, receives the universe predictions it was scored on."""
    from kinematic_pipeline.training.run import finetune

    started = time.perf_counter()
    policy = scaling_policy(settings, variant)
    scaled = dataclasses.replace(settings, train=scaling_budget(settings.train, n, long, variant))
    out = scratch_dir(settings, variant, n) / "2x_steps" if long else scratch_dir(settings, variant, n)
    result = finetune(scaled, policy, out_dir=out, foundation=foundation, progress=progress)
    seen = next((r["windows"] for r in result.curves if r["best"]), 0)  # served up to the kept state
    rows = sum(result.target_summary.values())
    cap = scaled.train.finetune_max_windows_per_epoch or scaled.train.max_windows_per_epoch
    scores, universe = adapter_scores(settings, policy, out, foundation, days, rates)
    if universe_out is not None:
        universe_out.append(universe)
    return {
        "variant": variant,
        "learner": TRANSFORMER_LONG if long else TRANSFORMER,
        "model": variant,
        "n_windows": n,
        "windows_seen": seen,
        "distinct_windows": distinct_served(rows, cap, policy.seed, seen),
        "train_rows": rows,
        "steps": result.steps,
        "best_step": result.best_step,
        **scores,
        "seconds": time.perf_counter() - started,
    }


def adapter_scores(
    settings: Settings, policy: Policy, out: Path, foundation: Path, days: list, rates: dict
) -> tuple[dict, pl.DataFrame]:
    """The adapter fine-tuned into ``out`` from ``foundation``, scored on ``days`` as the report scores the universe
    (``scaling_scores.score_universe``: rank IC, log-loss skill over ``rates``), and the universe predictions."""
    from kinematic_pipeline.models import HEADS
    from kinematic_pipeline.training.run import load_foundation

    head = HEADS[policy.variant.head.kind]
    classifier = head.load(load_foundation(settings, policy, foundation), out, policy.task.head_width).eval()
    fitted = classifier, settings.train.class_weights  # fine-tuned there, with these
    _, _, universe, _ = predictor(policy.variant).predictions(settings, policy, days, True, fitted)
    return score_universe(settings, universe, rates), universe


def probe_row(
    settings: Settings, variant: str, n: int | None, days: list, rates: dict, universe_out: list | None = None
) -> dict:
    """Fit ``variant``'s tokens' LR probe on a seeded sample of n labelled training rows (None: every row) and
    score it; ``universe_out``, when given, receives the universe predictions it was scored on."""
    started = time.perf_counter()
    probe = probe_of(variant)
    policy = dataclasses.replace(scaling_policy(settings, variant), variant=probe)  # the sample's seed: the model's
    capped = dataclasses.replace(settings, evaluate=dataclasses.replace(settings.evaluate, probe_max_train_rows=n))
    model, fit = train_probe(capped, policy)
    _, _, universe, _ = predictor(policy.variant).predictions(settings, policy, days, True, (model, fit))
    if universe_out is not None:
        universe_out.append(universe)
    return {
        "variant": variant,
        "learner": LR_ALL if n is None else LR_MATCHED,
        "model": probe,
        "n_windows": fit["train_rows"] if n is None else n,
        "windows_seen": fit["train_rows"],
        "distinct_windows": fit["train_rows"],
        "train_rows": fit["train_rows"],
        "steps": fit["iterations"],
        "best_step": None,
        **score_universe(settings, universe, rates),
        "seconds": time.perf_counter() - started,
    }


# --- the asset -------------------------------------------------------------------------------------------------


def variant_rows(
    settings: Settings,
    variant: str,
    foundation: Path,
    fold: Fold,
    rates: dict,
    sizes: list[int],
    progress: bool,
    log=None,
) -> list[dict]:
    """One variant's rows: its transformer at every n (and the largest n at twice the step cap), its tokens' LR probe
    at every n and on every row, then the trailing-volatility reference (``with_vol20``). The variants are
    independent: with ``train.processes`` > 1 each runs in its own process at its share of the cores."""
    from kinematic_pipeline.training.trainer import configure_threads

    configure_threads(settings.train)
    days = evaluation_days(settings, lookup_variant(variant).token_asset, fold)
    if not days:
        raise ValueError(f"no {variant} test day in fold {fold.label} ({fold.describe()}): nothing to score")
    learned: list[tuple[dict, pl.DataFrame]] = []  # (row, the universe it was scored on)
    for n, long in [*((n, False) for n in sizes), (sizes[-1], True)]:
        universe: list[pl.DataFrame] = []
        row = transformer_row(settings, variant, n, foundation, days, rates, progress, long, universe)
        learned.append((row, universe[0]))
        log_row(log, row)
    for n in [*sizes, None]:
        universe = []
        learned.append((probe_row(settings, variant, n, days, rates, universe), universe[0]))
        log_row(log, learned[-1][0])
    return with_vol20(settings, variant, learned, rates, log)


def materialize_scaling_curves(settings: Settings, progress: bool = False, log=None) -> ScalingSummary:
    """Every (variant, learner, n) row (see the module docstring), the table and the figure."""
    started = time.perf_counter()
    variants = scaling_variants(settings)
    if not variants:
        raise ValueError(f"train.variants {settings.train.variants} holds none of {SCALED_MODELS}: no scaling curve")
    foundations = check_foundations(settings, variants)
    fold, tau = scaling_fold(settings), settings.evaluate.report_tau
    rates = train_base_rates(settings)[CLOSE]
    sizes = sorted({int(n) for n in settings.evaluate.scaling_windows})
    work = [(settings, v, foundations[v], fold, rates, sizes, progress) for v in variants]
    if settings.train.processes > 1 and len(variants) > 1:  # a process a variant, as training side by side
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        workers = min(settings.train.processes, len(variants))
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            per_variant = list(pool.map(variant_rows, *zip(*work)))
        for row in (r for part in per_variant for r in part):
            log_row(log, row)
    else:
        per_variant = [variant_rows(*args, log=log) for args in work]
    rows = [row for part in per_variant for row in part]
    frame = pl.DataFrame(rows, schema=SCALING_SCHEMA)
    wh = settings.warehouse
    tables, figures = wh.report_tables_dir, wh.figures_dir
    tables.mkdir(parents=True, exist_ok=True)
    table_path = tables / f"{TABLE_NAME}.parquet"
    wh.write(frame, table_path)
    write_text_atomic(tables / f"{TABLE_NAME}.md", markdown_table(frame) + "\n")
    seed = settings.train.seeds[0]
    figure_path = scaling_png(frame, f"fold {fold.label}, seed {seed}, tau = {tau:g}", figures / f"{TABLE_NAME}.png")
    return ScalingSummary(frame, table_path, figure_path, fold.label, seed, tau, time.perf_counter() - started)


def scaling_png(frame: pl.DataFrame, subtitle: str, path: Path) -> Path:
    """Two panels against the distinct training windows a fit learned from (log x): (A) rank IC, (B) log-loss skill;
    per tokenization the transformer (solid; a star: the largest n at twice the step cap), its LR probe on as many
    rows (dashed: the rows it fitted, at most every row) and on every row (dotted, a diamond at the corpus's size). A
    fine-tuning that kept its initial state (best step 0: the head at the prior, the same p for every window) ranks
    nothing: its rank IC (NaN in the table) is drawn as 0, hollow."""
    from matplotlib.figure import Figure

    from kinematic_pipeline.report.figures import save_figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, (column, label) in zip(axes, (("rank_ic", "(A) rank IC"), ("logloss_skill", "(B) log-loss skill"))):
        for variant in dict.fromkeys(frame["variant"].to_list()):
            rows = frame.filter(pl.col("variant") == variant)
            colour, probe = color(variant), display_name(probe_of(variant))
            for learner, style, label in ((TRANSFORMER, "o-", ""), (TRANSFORMER_LONG, "*", ", 2x steps")):
                model = rows.filter(pl.col("learner") == learner).sort("n_windows")
                prior = (model["best_step"] == 0).to_numpy() & ~np.isfinite(model[column].to_numpy())
                y = np.where(prior, 0.0, model[column].to_numpy())
                x = model["distinct_windows"].to_numpy()  # distinct windows served up to the kept state
                ax.plot(
                    x,
                    y,
                    style,
                    color=colour,
                    ms=10 if learner == TRANSFORMER_LONG else 6,
                    label=display_name(variant) + label,
                )
                if prior.any():
                    ax.plot(x[prior], y[prior], "o", color="white", mec=colour, zorder=3)
            matched = rows.filter(pl.col("learner") == LR_MATCHED).unique("windows_seen").sort("windows_seen")
            ax.plot(matched["windows_seen"], matched[column], "s--", color=colour, alpha=0.7, label=f"{probe}, same n")
            for n, value in rows.filter(pl.col("learner") == LR_ALL).select("windows_seen", column).rows():
                ax.axhline(value, color=colour, ls=":", lw=1.2, label=f"{probe}, every row")
                ax.plot([n], [value], "D", color=colour, ms=5)
            for (value,) in rows.filter(pl.col("learner") == VOL_REFERENCE).select(column).rows():
                if value is not None and np.isfinite(value):  # its rank IC is undefined (a score of 0)
                    name = f"trailing vol20 ({display_name(variant)}'s rows)"
                    ax.axhline(value, color=colour, ls="-.", lw=1.0, alpha=0.8, label=name)
        ax.axhline(0.0, color="black", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("distinct training windows (fine-tuning) / rows fitted (probe)")
        ax.set_ylabel("daily rank IC vs r_close" if column == "rank_ic" else "log-loss skill vs base rates (close)")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Would more data help? Test-period skill against the data a fit saw ({subtitle})", fontsize=10)
    save_figure(fig, path)
    return path
