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
