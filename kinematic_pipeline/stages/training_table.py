"""How far each transformer trained: every foundation's and every adapter's (at the report's tau) step budget, the
steps it ran, its best step and best validation loss, read from the ``curves.csv`` its run wrote. A best step at the
last validation means the budget stopped a model that was still improving (under a cosine schedule that anneals to
zero this is the usual case, so the sufficiency of a budget is measured apart: ``benchmarks/bench_budget.py``, the
best validation loss at the budget against twice it); a best step of 0 means the initial state (the adapter's head
at the prior) beat every step.
"""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.variants import variant as lookup_variant

TRAINING_TABLE = "training"
STAGES = ("pretraining", "fine-tuning")


def model_runs(settings: Settings):
    """(variant, stage, policy, folder) of every foundation and adapter at the report's tau, per fold and seed."""
    wh = settings.warehouse
    for variant in settings.train.variants:
        for fold in settings.folds:
            for seed in settings.train.seeds:
                policy = Policy(variant, seed, settings.evaluate.report_tau, fold.name)
                yield variant, "pretraining", policy.foundation, wh.foundation_dir(policy)
                yield variant, "fine-tuning", policy, wh.adapter_dir(policy)


def training_table(settings: Settings) -> pl.DataFrame | None:
    """One row per trained model; None when no model has a learning curve (a run of the probes alone)."""
    from kinematic_pipeline.training.run import pretrain_budget
    from kinematic_pipeline.training.trainer import budget_steps, read_curves

    rows = []
    for variant, stage, policy, folder in model_runs(settings):
        curves = read_curves(folder)
        if not curves:
            continue
        budget = pretrain_budget(settings, policy) if stage == "pretraining" else settings.train.finetune_steps
        best = next((r for r in curves if r["best"]), curves[-1])
        last = curves[-1]["step"]
        rows.append(
            {
                "Model": lookup_variant(variant).display_name,
                "Stage": stage,
                "Fold": policy.fold or "-",
                "Seed": policy.seed,
                "Budget": budget_steps(settings.train, budget),
                "Steps run": last,
                "Best step": best["step"],
                "Best val loss": round(best["val_loss"], 5),
                "Best at the last step": "yes" if best["step"] == last else "no",
            }
        )
    return pl.DataFrame(rows) if rows else None


LEARNABILITY_TABLE = "learnability"
BUDGET_FRACTIONS = (0.25, 0.5, 1.0)


def learnability_table(settings: Settings) -> pl.DataFrame | None:
    """Fine-tuning at matched compute: every family under the same step budget, schedule and labels, its skill over
    the head's prior (1 - the best de-weighted validation log loss so far / that of the step-0 state, which is the
    prior) at the last validation within a quarter, a half and all of the budget, and the windows it had seen then; the mean over folds and
    seeds. Pretraining is left out: each family's own objective is not comparable across tokenizations. None when no
    adapter has a learning curve."""
    from kinematic_pipeline.training.trainer import budget_steps, read_curves

    budget = budget_steps(settings.train, settings.train.finetune_steps)
    runs: dict[str, list[list[dict]]] = {}
    for variant, stage, _, folder in model_runs(settings):
        curves = read_curves(folder)
        if stage == "fine-tuning" and curves and curves[0]["step"] == 0 and curves[0]["val_loss"] > 0:
            runs.setdefault(variant, []).append(curves)
    rows = []
    for variant, curves_of_runs in runs.items():
        spec = lookup_variant(variant)
        row = {"Model": spec.display_name, "Tokenization": spec.tokenization, "Runs": len(curves_of_runs)}
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


def budget_test_table(settings: Settings) -> pl.DataFrame | None:
    """Whether each family's budget is the answer: the best validation loss at its step budget and at twice it on one
    fold (``benchmarks/bench_budget.py`` measured it into ``reports/budget_test.parquet``), the family passing when
    twice the budget lowers it by no more than the tolerance; for an adapter, beside it the same fine-tuning from a
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
                "Stage": "pretraining" if r["stage"] == "pretrain" else "fine-tuning",
                "Fold": r["fold"],
                "Seed": r["seed"],
                "Budget: steps (best)": f"{r['budget_1x']}: {r['steps_1x']} ({r['best_step_1x']})",
                "Best val loss": round(r["best_val_loss_1x"], 5),
                "2x budget: steps (best)": f"{r['budget_2x']}: {r['steps_2x']} ({r['best_step_2x']})",
                "Best val loss at 2x": round(r["best_val_loss_2x"], 5),
                "2x lowers it by": f"{100 * r['gain']:+.2f}%",
                "Passes": f"{'yes' if r['passes'] else 'no'} (within {100 * r['tolerance']:g}%)",
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
