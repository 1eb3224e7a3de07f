"""How far each transformer trained: every foundation's and every adapter's (of each task the report reads: the
report's tau and, where the run has it, the volatility task's first horizon) step budget, the steps it ran, its best
step and best validation loss, and the learning rate's fraction of its peak at its last step (0: annealed; a run
the cosine stopped at a stall keeps most of it), read from the ``curves.csv`` its run wrote; a warm-started
foundation says so, and whether it kept its parent (its best state the one it started from). A
best step at the last validation means the budget stopped a model that was still improving (under a schedule that
anneals to zero this is the usual case, so the sufficiency of a budget is measured apart:
``benchmarks/bench_budget.py``, the best validation loss at the budget against twice it); a best step of 0 means the
initial state (the adapter's head at the prior) beat every step.
"""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import PARENT_FILE
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.run_keys import policy_tasks, run_task
from kinematic_pipeline.training.curves import budget_steps, pretrain_budget, read_curves
from kinematic_pipeline.variants import color, display_name
from kinematic_pipeline.variants import variant as lookup_variant

TRAINING_TABLE = "training"
STAGES = ("pretraining", "fine-tuning")


def model_runs(settings: Settings, every_reported_task: bool = False):
    """(variant, stage, policy, folder) of every foundation and of every adapter at the report's tau, per fold and
    seed; with ``every_reported_task``, the adapters of each task the report reads (``Task.reported``) after it."""
    wh = settings.warehouse
    for variant in settings.train.variants:
        tasks = [run_task(settings, settings.evaluate.report_tau)]
        if every_reported_task:
            others = (t for t in policy_tasks(settings, variant) if t.reported(settings) and t.key != tasks[0].key)
            tasks.extend(others)
        for fold in settings.folds:
            for seed in settings.train.seeds:
                policies = [Policy(variant, task, seed, fold) for task in tasks]
                yield variant, "pretraining", policies[0].foundation, wh.foundation_dir(policies[0])
                for policy in policies:
                    yield variant, "fine-tuning", policy, wh.adapter_dir(policy)


def training_table(settings: Settings) -> pl.DataFrame | None:
    """One row per trained model, an adapter's task by its key (a foundation's "-"); None when no model has a
    learning curve (a run of the probes alone)."""
    rows = []
    for variant, stage, policy, folder in model_runs(settings, every_reported_task=True):
        curves = read_curves(folder)
        if not curves:
            continue
        own = settings.train.steps_for(variant, "finetune")
        budget = pretrain_budget(settings, policy) if stage == "pretraining" else own
        best = next((r for r in curves if r["best"]), curves[-1])
        last = curves[-1]["step"]
        warm = stage == "pretraining" and (folder / PARENT_FILE).exists()  # continued the previous fold's
        kept = " (kept its parent)" if warm and best["step"] == 0 else ""
        rows.append(
            {
                "Model": lookup_variant(variant).display_name,
                "Stage": f"{stage}, warm-started{kept}" if warm else stage,
                "Task": policy.task.key if stage == "fine-tuning" else "-",
                "Fold": policy.fold.name or "-",
                "Seed": policy.seed,
                "Budget": budget_steps(settings.train, budget),
                "Steps run": last,
                "Best step": best["step"],
                "Best val loss": round(best["val_loss"], 5),
                "Best at the last step": "yes" if best["step"] == last else "no",
                "LR left at the stop": round(curves[-1]["lr_fraction"], 3),
            }
        )
    return pl.DataFrame(rows) if rows else None


LEARNABILITY_TABLE = "learnability"
BUDGET_FRACTIONS = (0.25, 0.5, 1.0)


def learnability_table(settings: Settings) -> pl.DataFrame | None:
    """Fine-tuning at matched compute: every family under the same step budget, schedule and labels, its skill over
    the head's prior (1 - the best de-weighted validation log loss so far / that of the step-0 state, which is the
    prior) at the last validation within a quarter, a half and all of the budget, and the windows it had seen then; the mean over folds and
    seeds; a variant with a fine-tuning budget of its own (``train.steps_of``) is left out. Pretraining is left out: each family's own objective is not comparable across tokenizations. None when no
    adapter has a learning curve."""
    budget = budget_steps(settings.train, settings.train.finetune_steps)
    runs: dict[str, list[list[dict]]] = {}
    for variant, stage, _, folder in model_runs(settings):
        if settings.train.steps_for(variant, "finetune") != settings.train.finetune_steps:
            continue  # a budget of its own (train.steps_of): not at the matched schedule
        curves = read_curves(folder)
        if stage == "fine-tuning" and curves and curves[0]["step"] == 0 and curves[0]["val_loss"] > 0:
            runs.setdefault(variant, []).append(curves)
    rows = []
    for variant, curves_of_runs in runs.items():
        spec = lookup_variant(variant)
        row = {"Model": spec.display_name, "Tokenization": spec.tokenization.name, "Runs": len(curves_of_runs)}
        for fraction in BUDGET_FRACTIONS:
            step = int(fraction * budget) // settings.train.eval_every * settings.train.eval_every  # a validation
            skills, windows = [], []
            for curves in curves_of_runs:
                seen = [r for r in curves if r["step"] <= step]  # a run stopped early: its best stands
                skills.append(1.0 - min(r["val_loss"] for r in seen) / curves[0]["val_loss"])
                windows.append(seen[-1]["windows"])
            label = f"{step} steps"
            row[f"Skill at {label}"] = round(sum(skills) / len(skills), 5)
            row[f"Windows seen at {label}"] = round(sum(windows) / len(windows))
        rows.append(row)
    return pl.DataFrame(rows) if rows else None


BUDGET_TEST_TABLE = "budget_test"
# bench_budget's stages: from scratch on the first fold, an adapter, a later fold continuing from the one before, and
# (--downstream) the pretraining judged by its adapter: the row's runs are fine-tunings from the 1x and 2x foundations
STAGE_NAMES = {
    "pretrain": "pretraining",
    "finetune": "fine-tuning",
    "warm_start": "pretraining, warm-started",
    "pretrain_downstream": "pretraining, by its adapter (fine-tuned from the 1x / 2x foundation)",
}
TASK_STAGES = ("finetune", "pretrain_downstream")  # the stages whose runs are adapters of one task


def budget_test_table(settings: Settings) -> pl.DataFrame | None:
    """Whether each family's budget is the answer: the best validation loss at its step budget and at twice it on one
    fold per seed (``benchmarks/bench_budget.py`` measured it into ``reports/budget_test.parquet``), the family
    passing when twice the budget moves the seeds' mean by no more than their spread, either way
    (``training/budget.py``); for an adapter, beside it the same fine-tuning from a
    random backbone (does pretraining help?). None until the benchmark has run on this warehouse."""
    path = settings.warehouse.budget_test_file
    if not path.exists():
        return None
    rows = []
    for r in pl.read_parquet(path).iter_rows(named=True):
        random = r["random_best_val_loss"]
        rows.append(
            {
                "Model": lookup_variant(r["variant"]).display_name,
                "Stage": STAGE_NAMES[r["stage"]],
                # an adapter's task by its key (0.01: Buy/Sell/Hold's tau; vol5), "-" for a foundation; a table
                # written before the column held Buy/Sell/Hold's at 0.01
                "Task": r.get("task", "0.01" if r["stage"] in TASK_STAGES else "") or "-",
                "Fold": r["fold"],
                "Seed": r["seed"],
                "Budget: steps (best)": f"{r['budget_1x']}: {r['steps_1x']} ({r['best_step_1x']})",
                "Best val loss": round(r["best_val_loss_1x"], 5),
                "2x budget: steps (best)": f"{r['budget_2x']}: {r['steps_2x']} ({r['best_step_2x']})",
                "Best val loss at 2x": round(r["best_val_loss_2x"], 5),
                # of the peak rate, at each run's stop: 0 where the schedule annealed to its end
                "Rate left at the stop (1x / 2x)": " / ".join(
                    _fraction(r.get(f"lr_fraction_{x}")) for x in ("1x", "2x")
                ),
                "2x lowers it by": f"{100 * r['gain']:+.2f}%",
                "Passes": f"{'yes' if r['passes'] else 'no'} (seed spread {100 * r['tolerance']:.2f}%)",
                "From a random backbone": "-" if random is None else f"{random:.5f}",
                "Pretraining lowers it by": "-" if random is None else f"{100 * r['pretraining_gain']:+.2f}%",
                # --pretrain-horizon h: fine-tuned from a foundation pretrained h tokens ahead, against the random one
                "From a foundation pretrained h ahead": (
                    "-"
                    if r.get("horizon") is None
                    else f"{r['horizon_best_val_loss']:.5f} (h={r['horizon']}: {100 * r['horizon_gain']:+.2f}%)"
                ),
                "Commit": r["commit"],
            }
        )
    return pl.DataFrame(rows) if rows else None


def _fraction(value) -> str:
    """A rate fraction to 2 places; '-' where it is not recorded (a table the benchmark wrote before the column)."""
    return "-" if value is None or value != value else f"{value:.2f}"


LEARNABILITY_TEST_TABLE = "learnability_test"
LEARNABILITY_TEST_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,  # the transformer whose tokenization the row is about
    "learner": pl.String,  # transformer (one row per validated state) | lr_<tokenization> (its tokens' probe)
    "fold": pl.String,
    "seed": pl.Int64,
    "tau": pl.Float64,
    "commit": pl.String,  # the commit benchmarks/bench_learnability.py ran at
    "budget": pl.Int64,  # the fine-tuning's step budget (probe: null)
    "step": pl.Int64,  # the validated state's optimizer step (0: the head at the prior; probe: null)
    "windows": pl.Int64,  # training windows served up to that step (probe: the rows it fitted)
    "val_loss": pl.Float64,  # the de-weighted validation log loss the run stops on (probe: null)
    "val_skill": pl.Float64,  # 1 - val_loss / the step-0 state's (probe: null)
    "kept": pl.Boolean,  # the state the fine-tuning kept: its best validation loss (probe: null)
    "rank_ic": pl.Float64,  # test days, universe: mean daily rank IC of p_buy - p_sell against r_close
    "rank_ic_t_nw": pl.Float64,
    "logloss_skill": pl.Float64,  # test days, universe: log-loss skill on close-to-close labels over base rates
    "logloss_skill_ci_low": pl.Float64,
    "logloss_skill_ci_high": pl.Float64,
    "ci_block_days": pl.Int64,
    "test_rows": pl.Int64,
}


def learnability_test_table(settings: Settings) -> pl.DataFrame | None:
    """Learnability at matched compute on test days: each family's fine-tuning under the one budget and schedule, at
    every validated state, its validation skill over the prior beside the test rank IC and log-loss skill that state
    scores on the universe (``benchmarks/bench_learnability.py`` measured them into
    ``reports/learnability_test.parquet``; the test days chose nothing), and its tokens' LR probe on the same days.
    None until the benchmark has run on this warehouse."""
    path = settings.warehouse.learnability_test_file
    if not path.exists():
        return None
    rows = []
    for r in pl.read_parquet(path).iter_rows(named=True):
        spec = lookup_variant(r["variant"])
        probe = r["learner"] != "transformer"
        rows.append(
            {
                "Model": lookup_variant(r["learner"]).display_name if probe else spec.display_name,
                "Tokenization": spec.tokenization.name,
                "Fold": r["fold"],
                "Seed": r["seed"],
                "Step (budget)": "fitted" if probe else f"{r['step']} ({r['budget']})",
                "Windows seen": r["windows"],
                "Validation skill over the prior": None if probe else round(r["val_skill"], 5),
                "Kept": "-" if probe else ("yes" if r["kept"] else "no"),
                "Test rank IC (t, Newey-West)": _value_t(r["rank_ic"], r["rank_ic_t_nw"]),
                "Test log-loss skill [95% CI]": (
                    f"{r['logloss_skill']:+.5f} [{r['logloss_skill_ci_low']:+.5f}, {r['logloss_skill_ci_high']:+.5f}]"
                ),
                "Commit": r["commit"],
            }
        )
    return pl.DataFrame(rows) if rows else None


def _value_t(value: float | None, t: float | None) -> str:
    if value is None or value != value:  # a state at the prior ranks nothing (the same p for every window)
        return "- (no ranking)"
    return f"{value:+.4f} ({t:+.2f})"


def learnability_test_png(frame: pl.DataFrame, path):
    """Three panels against the fine-tuning's optimizer steps: (A) validation skill over the prior, (B) test rank IC,
    (C) test log-loss skill; one line per family (a larger dot: the state it kept), its tokens' LR probe dashed in
    its colour. A state at the prior ranks nothing: its rank IC is drawn as 0, hollow."""
    import numpy as np
    from matplotlib.figure import Figure

    from kinematic_pipeline.report.figures import save_figure

    fig = Figure(figsize=(13, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    panels = (
        ("val_skill", "(A) validation skill over the prior"),
        ("rank_ic", "(B) test rank IC vs r_close"),
        ("logloss_skill", "(C) test log-loss skill vs base rates"),
    )
    for ax, (column, title) in zip(axes, panels):
        for variant in dict.fromkeys(frame["variant"].to_list()):
            rows = frame.filter(pl.col("variant") == variant)
            model = rows.filter(pl.col("learner") == "transformer").sort("step")
            values = model[column].to_numpy().astype(float)
            undefined = ~np.isfinite(values)
            y = np.where(undefined, 0.0, values)
            ax.plot(model["step"], y, "o-", color=color(variant), ms=4, label=display_name(variant))
            kept = model["kept"].to_numpy()
            ax.plot(model["step"].to_numpy()[kept], y[kept], "o", color=color(variant), ms=9)
            if undefined.any():
                ax.plot(model["step"].to_numpy()[undefined], y[undefined], "o", color="white", mec=color(variant))
            for learner, value in rows.filter(pl.col("learner") != "transformer").select("learner", column).rows():
                if value is not None and np.isfinite(value):
                    ax.axhline(value, color=color(variant), ls="--", lw=1.0, label=display_name(learner))
        ax.axhline(0.0, color="black", lw=0.6)
        ax.set_xlabel("fine-tuning optimizer steps")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7)  # the panel that holds every line: the families and their probes
    first = frame.row(0, named=True)
    fig.suptitle(
        f"Learnability at matched compute (fold {first['fold']}, seed {first['seed']}, tau = {first['tau']:g})",
        fontsize=10,
    )
    save_figure(fig, path)
    return path
