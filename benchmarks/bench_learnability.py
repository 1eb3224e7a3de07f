"""Learnability at matched compute, on test days: each tokenization's validation loss, test skill and rank IC against
the optimizer steps and training windows of one fine-tuning under one budget and schedule.

For each transformer of ``--variants`` (default: SplineGPT, RawGPT-FD and RawGPT, one per tokenization, those the run
trains), on one walk-forward fold of a materialized warehouse: the adapter the pipeline trains (its foundation, seed,
tau, budget, schedule and early stopping) fine-tuned once more into a temporary folder, keeping a copy of the
classifier at every validation (step 0: the head at the prior). Each copy is then scored as the report scores the
universe (``stages.scaling_scores.score_universe``): its calibrated predictions on the fold's test days over the
universe tickers, the daily cross-sectional rank IC of p_buy - p_sell against the next day's close-to-close return
(with its Newey-West t), and the log-loss skill on close-to-close labels over the fold's training base rates (with its
day-block bootstrap interval). The test days choose nothing: the run keeps its best validation state as every
fine-tuning does, and the test columns only show what each validated state would have scored. Beside each family,
its tokens' logistic-regression probe (``lr_<tokenization>``, fitted as the pipeline fits it) on the same days: a
line the curves can be read against.

    KP_PROFILE=real KP_SOURCE=parquet KP_SOURCE_PATH=... KP_SEEDS=... \\
        python benchmarks/bench_learnability.py [--fold 2019] [--seed 1234] [--tau 0.01] [--variants ...] [--json PATH]

Writes ``reports/learnability_test.parquet`` and ``reports/figures/learnability_test.png``; the report shows both from
its next materialize.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lightning as L  # noqa: E402
import polars as pl  # noqa: E402

from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.folds import evaluation_days  # noqa: E402
from kinematic_pipeline.policy import Policy  # noqa: E402
from kinematic_pipeline.run_keys import run_task  # noqa: E402
from kinematic_pipeline.stages.scaling_scores import score_universe  # noqa: E402
from kinematic_pipeline.stages.training_table import LEARNABILITY_TEST_SCHEMA, learnability_test_png  # noqa: E402
from kinematic_pipeline.variants import variant as lookup_variant  # noqa: E402

DEFAULT_VARIANTS = ("splinegpt", "rawgpt_fd", "rawgpt")  # one transformer per tokenization: spline, fd, raw


class Snapshots(L.Callback):
    """A copy of the classifier at every validation (the step-0 one, before any step, included): {step: module}."""

    def __init__(self) -> None:
        self.states: dict[int, object] = {}

    def on_validation_end(self, trainer, pl_module) -> None:
        if "val/loss" in trainer.callback_metrics:
            self.states[trainer.global_step] = copy.deepcopy(pl_module.classifier).eval()


def transformer_rows(settings, policy: Policy, fold, days: list, rates: dict, out: Path, commit: str) -> list[dict]:
    """``policy``'s fine-tuning, one row per validated state: its validation loss and skill over the prior, and the
    test scores of that state."""
    from kinematic_pipeline.predictors.families import predictor
    from kinematic_pipeline.training.run import finetune

    snapshots = Snapshots()
    result = finetune(settings, policy, out_dir=out, progress=False, callbacks=[snapshots])
    prior = result.curves[0]["val_loss"]
    rows = []
    for curve in result.curves:
        started = time.perf_counter()
        classifier = snapshots.states[curve["step"]]
        fitted = classifier, settings.train.class_weights
        _, _, universe, _ = predictor(policy.variant).predictions(settings, policy, days, True, fitted)
        rows.append(
            {
                **row_keys(policy, fold, "transformer", commit),
                "budget": result.budget_steps,
                "step": curve["step"],
                "windows": curve["windows"],
                "val_loss": curve["val_loss"],
                "val_skill": 1.0 - curve["val_loss"] / prior,
                "kept": bool(curve["best"]),
                **score_universe(settings, universe, rates),
            }
        )
        print(
            f"  {policy.variant.name} step {curve['step']:>4}: val loss {curve['val_loss']:.5f}, test rank IC "
            f"{rows[-1]['rank_ic']:+.4f} (t {rows[-1]['rank_ic_t_nw']:+.2f}), log-loss skill "
            f"{rows[-1]['logloss_skill']:+.5f} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    return rows


def probe_row(settings, policy: Policy, fold, days: list, rates: dict, commit: str) -> dict | None:
    """The logistic-regression probe on ``policy``'s tokens' window features, fitted and scored on the same days."""
    from kinematic_pipeline.predictors.families import predictor
    from kinematic_pipeline.stages.baselines import train_probe
    from kinematic_pipeline.variants import ALL_VARIANTS

    probe = f"lr_{lookup_variant(policy.variant.name).tokenization.name}"
    if probe not in ALL_VARIANTS:
        return None
    probe_policy = dataclasses.replace(policy, variant=probe)
    model, fit = train_probe(settings, probe_policy)
    _, _, universe, _ = predictor(probe_policy.variant).predictions(settings, probe_policy, days, True, (model, fit))
    return {
        **row_keys(policy, fold, probe, commit),
        "windows": fit["train_rows"],
        **score_universe(settings, universe, rates),
    }


def row_keys(policy: Policy, fold, learner: str, commit: str) -> dict:
    return {
        "variant": policy.variant.name,
        "learner": learner,
        "fold": fold.label,
        "seed": policy.seed,
        "tau": policy.task.tau,
        "commit": commit,
    }


def main() -> None:
    from kinematic_pipeline.stages.base_rates import CLOSE, train_base_rates

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fold", help="a walk-forward fold (default: the first)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--tau", type=float, help="default: the report's tau")
    parser.add_argument("--variants", nargs="+")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = load_settings()
    fold = next((f for f in settings.folds if f.name == args.fold), None) if args.fold else settings.folds[0]
    if fold is None:
        raise SystemExit(f"--fold {args.fold}: expected one of {', '.join(str(f.name) for f in settings.folds)}")
    seed = args.seed if args.seed is not None else settings.train.seeds[0]
    tau = args.tau if args.tau is not None else settings.evaluate.report_tau
    variants = args.variants or [v for v in DEFAULT_VARIANTS if v in settings.train.variants]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    commit = commit.stdout.strip() or "unknown"
    rates = train_base_rates(settings)[CLOSE]
    print(f"profile {settings.profile}, warehouse {settings.warehouse}, fold {fold.label}, seed {seed}, tau {tau}")
    rows: list[dict] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in variants:
            policy = Policy(name, run_task(settings, tau), seed, fold)
            days = evaluation_days(settings, lookup_variant(name).token_asset, fold)
            rows += transformer_rows(settings, policy, fold, days, rates, Path(tmp) / name, commit)
            probe = probe_row(settings, policy, fold, days, rates, commit)
            if probe is not None:
                rows.append(probe)
                print(
                    f"  {probe['learner']}: test rank IC {probe['rank_ic']:+.4f}, skill {probe['logloss_skill']:+.5f}"
                )
    frame = pl.DataFrame(rows, schema=LEARNABILITY_TEST_SCHEMA)
    if args.json:
        args.json.write_text(json.dumps(frame.to_dicts(), indent=2, default=str))
    wh = settings.warehouse
    wh.learnability_test_file.parent.mkdir(parents=True, exist_ok=True)
    wh.write(frame, wh.learnability_test_file)  # atomic, as every warehouse file: a report never reads half of it
    wh.figures_dir.mkdir(parents=True, exist_ok=True)
    figure = learnability_test_png(frame, wh.figures_dir / "learnability_test.png")
    print(f"wrote {wh.learnability_test_file} and {figure} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
