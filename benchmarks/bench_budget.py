"""Is the step budget the answer, and does pretraining help? For each family, on one walk-forward fold of a materialized warehouse, the best
validation loss a foundation and an adapter reach at the profile's budget against what twice the budget reaches,
over at least two seeds, both runs annealed to 0 at their end (the profile's ``train.schedule``), judged by the
two-sided test of ``kinematic_pipeline/training/budget.py``: the budget passes when doubling it moves the seeds' mean
best validation loss by no more than the seeds' own spread, either way.

    KP_PROFILE=real KP_SOURCE=parquet KP_SOURCE_PATH=... KP_WAREHOUSE=warehouse/real \\
        python benchmarks/bench_budget.py [--fold 2019] [--seeds 1234 1235] [--tau 0.01 | --task vol5] [--variants ...]
            [--json PATH]
            [--ablation-seeds 3] [--test-days] [--fresh] [--reuse-warehouse]

Each run's row is kept under ``<warehouse>/reports/budget_runs/<settings fingerprint>/`` as it ends, and a later
invocation with the same settings and code reuses it: a benchmark of hours on ``real`` stopped half-way (killed, the
machine taken back) trains only what it had not (``--fresh``: everything again). Two invocations with disjoint
``--variants`` at ``KP_TRAIN_THREADS=1`` use both cores of a 2-core machine (each adds its families' rows to the
report's table, ``merge_budget_test``). ``--reuse-warehouse`` takes each 1x run
from the warehouse where the DAG trained it under these settings (``from_warehouse``): on a materialized ``real``
warehouse only the 2x runs and the ablation train, and the budget judged is the production models' own.

The foundation runs train from scratch (the first fold has no parent; a later fold's ``--fold`` is trained from
scratch as well, at the from-scratch budget) into a temporary folder, never the warehouse's; both adapters are
fine-tuned from the warehouse's foundation of that fold (materialize it first), and the next fold's foundation
continues from it (the warm start, ``train.warm_start_steps`` against twice that). Pretraining loss is the family's own
objective, the adapters' the de-weighted log loss they stop on.

``--downstream`` judges each pretraining budget by what the foundation is for: each seed's adapter (of ``--task``,
by default Buy/Sell/Hold at ``--tau``; the 1x fine-tuning budget) fine-tuned from its 1x foundation and from its 2x
foundation, the same two-sided test over the seeds on the adapters' best validation losses (rows of stage
``pretrain_downstream``). A foundation's own loss can keep falling with every doubling (a corpus larger than the
budget serves) while the adapter it gives moves less than a change of seed: then the pretraining budget is not what
sets the answers. The 2x foundations are kept beside the runs' rows (``foundations/``) so that a later invocation
fine-tunes from them.

The second table is the pretraining ablation: each family's adapter fine-tuned from its foundation (the 1x run
above) against the same fine-tuning, seed and budget from a randomly initialized backbone (the foundation's own
initialization: the seed's draw before any pretraining step), on the first ``--ablation-seeds`` seeds, with the
mean and sd of the gain over them. A family whose pretraining helps reaches a lower validation loss from its
foundation. ``--test-days`` also scores both adapters' kept states on the fold's test days (rank IC, log-loss skill).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.config.fingerprint import fingerprint  # noqa: E402
from kinematic_pipeline.folds import fold_names  # noqa: E402
from kinematic_pipeline.model_pins import PARENT_FILE, check_class_weights, check_pair  # noqa: E402
from kinematic_pipeline.models import build_model  # noqa: E402
from kinematic_pipeline.policy import Foundation, Policy  # noqa: E402
from kinematic_pipeline.run_keys import named_task, run_task  # noqa: E402
from kinematic_pipeline.stages.training_table import TASK_STAGES  # noqa: E402
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold  # noqa: E402
from kinematic_pipeline.training.budget import budget_verdict  # noqa: E402
from kinematic_pipeline.training.curves import budget_steps, pretrain_budget, read_curves  # noqa: E402
from kinematic_pipeline.training.modules import follows_schedule  # noqa: E402
from kinematic_pipeline.training.run import finetune, pretrain, read_foundation, save_foundation  # noqa: E402
from kinematic_pipeline.variants import variant as lookup_variant  # noqa: E402
from kinematic_pipeline.warehouse.layout import MODEL_FILE  # noqa: E402
from kinematic_pipeline.warehouse.verified import MODEL_MANIFEST, verify_model_folder, write_model_manifest  # noqa: E402

STAGES = ("pretrain", "finetune", "warm_start")


def scaled(settings, factor: int, stage: str):
    """The settings with ``stage``'s step budget (``pretrain``, ``finetune`` or ``warm_start``) times ``factor``; warm
    starts off except in ``warm_start``, a later fold's foundation continuing from the warehouse's previous fold's."""
    train = settings.train
    if stage == "warm_start":
        steps = (train.warm_start_steps or train.pretrain_steps) * factor
        return dataclasses.replace(settings, train=dataclasses.replace(train, warm_start=True, warm_start_steps=steps))
    steps = {f"{stage}_steps": getattr(train, f"{stage}_steps") * factor}
    steps["steps_of"] = tuple((v, s, n * factor if s == stage else n) for v, s, n in train.steps_of)  # a variant's own
    return dataclasses.replace(settings, train=dataclasses.replace(train, warm_start=False, **steps))


def random_foundation(settings, policy: Policy, folder: Path) -> Path:
    """A foundation folder holding the backbone as ``pretrain`` initializes it (seeded, no step taken)."""
    import lightning as L

    folder.mkdir(parents=True)
    L.seed_everything(policy.seed, workers=True, verbose=False)
    model = build_model(policy.variant.name, settings.model)
    path = folder / MODEL_FILE
    save_foundation(settings, policy, model.state_dict(), path)
    write_model_manifest(folder, [path])
    return path


def scored_on_test_days(stage: str, seed: int, seeds: list[int], args) -> bool:
    """Whether a fine-tuning's 1x run is scored on test days: an ablation seed's, under ``--test-days``."""
    ablated = seeds[: args.ablation_seeds]
    return bool(args.test_days) and stage == "finetune" and seed in ablated and not args.no_ablation


def from_random(settings, policy: Policy, tmp: Path, test: TestDays | None = None) -> dict:
    """``policy``'s adapter fine-tuned at the 1x budget from its backbone as initialized (no pretraining step)."""
    name = f"{policy.variant.name}_{policy.seed}"
    backbone = random_foundation(settings, policy, tmp / f"{name}_random_backbone")
    return run(settings, policy, "finetune", 1, tmp / f"{name}_from_random", backbone, test)


def from_horizon(settings, policy: Policy, horizon: int, tmp: Path) -> dict:
    """Pretrain ``policy``'s foundation from scratch with the target ``horizon`` tokens ahead (the 1x budget), then
    fine-tune from it at the 1x budget: both runs' rows (the foundation is pinned to that model config, so the
    fine-tuning runs under it too; fine-tuning itself does not read the horizon)."""
    gpt = dataclasses.replace(settings.model.gpt, pretrain_horizon=horizon)
    far = dataclasses.replace(settings, model=dataclasses.replace(settings.model, gpt=gpt))
    folder = tmp / f"{policy.variant.name}_horizon{horizon}_pretrain"
    foundation = policy.foundation
    pretrained = run(far, foundation, "pretrain", 1, folder)
    return {
        "horizon": horizon,
        "pretrain": pretrained,
        "finetune": run(
            far, policy, "finetune", 1, tmp / f"{policy.variant.name}_horizon{horizon}", folder / MODEL_FILE
        ),
    }


def doubled_foundation(settings, foundation: Foundation, folder: Path) -> Path:
    """The ``model.pt`` of ``foundation`` pretrained at twice the budget into ``folder`` (the benchmark's 2x run of
    stage ``pretrain``), trained again, from an empty folder, where it is not there (a run killed half-way, a row kept
    before the benchmark kept the weights: the run is deterministic)."""
    if not (folder / MODEL_MANIFEST).exists():
        run(settings, foundation, "pretrain", 2, emptied(folder))
    return folder / MODEL_FILE


def emptied(folder: Path) -> Path:
    """``folder`` with nothing in it: what a run killed half-way there left is not continued from."""
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def downstream(settings, variant: str, fold: str, seeds: list[int], cache, tmp: Path, kept: Path, args) -> list[dict]:
    """``--downstream``: each seed's adapter fine-tuned at the 1x budget from its 1x foundation (the ``finetune``
    stage's 1x run, the warehouse's own under ``--reuse-warehouse``) and from its 2x foundation (kept under
    ``kept``), judged by the two-sided test over the seeds: the rows of stage ``pretrain_downstream``."""
    family, label = [], f"adapter from the pretraining at 1x / 2x, {fold}"
    for s in seeds:
        seeded = Foundation.named(settings.folds, variant, s, fold)
        policy, one_name, name = (
            seeded.on(args.task),
            f"{variant}_finetune_{fold}_{s}{args.tag}_1x",
            f"{variant}_pretrain_{fold}_{s}",
        )

        def from_one(p=policy, n=one_name):
            return first(settings, p, "finetune", tmp / n, None, args.reuse_warehouse)

        def from_two(p=policy, f=seeded, n=name):
            doubled = doubled_foundation(settings, f, kept / f"{n}_2x")
            return run(settings, p, "finetune", 1, tmp / f"{n}_2x_adapter{args.tag}", doubled)

        one, two = cache.get(one_name, from_one), cache.get(f"{name}_2x_adapter{args.tag}", from_two)
        family.append(paired_row(variant, "pretrain_downstream", fold, s, one, two, label))
    return judged(family, variant, label)


def paired_row(variant: str, stage: str, fold: str, seed: int, one: dict, two: dict, label: str) -> dict:
    """One seed's row of a family's test (its 1x and 2x runs, what doubling gained), printed as a table line."""
    gain = (one["best_val_loss"] - two["best_val_loss"]) / abs(one["best_val_loss"])
    print(
        f"| {variant} | {label} | {seed} | {steps_text(one)} | {one['best_val_loss']:.5f} | {steps_text(two)} | "
        f"{two['best_val_loss']:.5f} | {100 * gain:+.2f}% | |",
        flush=True,
    )
    return {"variant": variant, "stage": stage, "fold": fold, "seed": seed, "1x": one, "2x": two, "gain": gain}


def judged(family: list[dict], variant: str, label: str) -> list[dict]:
    """The family's rows with the two-sided test over their seeds (``training/budget.py``), its line printed."""
    verdict = budget_verdict([r["1x"]["best_val_loss"] for r in family], [r["2x"]["best_val_loss"] for r in family])
    print(f"| {variant} | {label} | all | | | | | | {verdict.reason} |", flush=True)
    for row in family:
        row.update(passes=verdict.passes, tolerance=verdict.spread / abs(verdict.mean_1x))
    return family


class Runs:
    """Each training run's row, kept as one JSON file per run under ``folder`` (the warehouse's
    ``reports/budget_runs/<settings fingerprint>/``): a benchmark stopped after hours (killed, the machine taken back)
    runs again only what it had not finished; other settings or code (rates, budgets, stage versions) get another
    folder. ``None``: nothing kept."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.reused = 0

    def get(self, name: str, make) -> dict:
        path = None if self.folder is None else self.folder / f"{name}.json"
        if path is not None and path.exists():
            self.reused += 1
            return json.loads(path.read_text())
        row = make()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            staged = path.with_suffix(".tmp")
            staged.write_text(json.dumps(row))
            staged.replace(path)  # whole or absent: a run killed while writing is run again
        return row


def run(
    settings, policy: Policy, stage: str, factor: int, out: Path, foundation: Path | None = None, test=None
) -> dict:
    """One run's row; ``test`` (``TestDays``) scores a fine-tuned adapter's kept state on the fold's test days too."""
    s = scaled(settings, factor, stage)
    if stage != "finetune":  # warm_start: from the warehouse's foundation of the previous fold
        result = pretrain(s, policy, out_dir=out, progress=False)
    else:  # from the warehouse's foundation of the fold, or the one given
        result = finetune(s, policy, out_dir=out, foundation=foundation, progress=False)
    row = {
        "budget": result.budget_steps,
        "steps": result.steps,
        "best_step": result.best_step,
        "best_val_loss": result.best_val_loss,
        "lr_fraction": (read_curves(out) or [{"lr_fraction": float("nan")}])[-1]["lr_fraction"],  # left at the stop
        "seconds": result.seconds,
    }
    if test is not None and stage == "finetune":
        row |= test.score(s, policy, out, foundation)
    return row


def from_warehouse(settings, policy: Policy, stage: str) -> dict | None:
    """``--reuse-warehouse``: the 1x run the DAG trained itself, read from the warehouse model's curves, when it is
    the run this stage's 1x would train: the same model config (the foundation's ``model.pt``), a first fold's
    foundation from scratch (``pretrain``) or a later one continuing from its parent (``warm_start``), an adapter
    fine-tuned from the foundation on disk now with the settings' class weights (``finetune``), trained under the 1x
    budget's schedule (``modules.follows_schedule``: a model of another budget is trained here instead).
    Its weights are checked against their ``files.json``; None where the warehouse holds no such model (trained
    here). Its seconds are the DAG's (``timings``), not kept here."""
    wh, s = settings.warehouse, scaled(settings, 1, stage)
    folder = wh.adapter_dir(policy) if stage == "finetune" else wh.foundation_dir(policy)
    if not (folder / MODEL_MANIFEST).exists() or not (wh.foundation_dir(policy) / MODEL_MANIFEST).exists():
        return None  # not materialized
    read_foundation(s, policy.foundation)  # intact, this model config, its parent (if any) the one on disk
    if stage == "finetune":
        check_pair(wh, policy)  # fine-tuned from the foundation on disk now
        check_class_weights(s, policy)
        verify_model_folder(folder, f"re-materialize {policy.variant.asset('adapter')} {policy.key}")
    continued = (wh.foundation_dir(policy) / PARENT_FILE).exists()
    if stage != "finetune" and continued != (stage == "warm_start"):
        return None  # from scratch where the stage continues, or the other way round
    budget = s.train.steps_for(policy.variant.name, "finetune") if stage == "finetune" else pretrain_budget(s, policy)
    curves, total = read_curves(folder), budget_steps(s.train, budget)
    at_rate = stage == "warm_start" and s.train.warm_start_rate is not None  # no warmup, a fraction of the peak
    if not curves or curves[-1]["step"] > total or not follows_schedule(curves, s.train, total, at_rate):
        return None  # trained under another budget or schedule (e.g. the profile's, where KP_PRETRAIN_STEPS doubles it)
    best = next((r for r in curves if r["best"]), curves[-1])
    return {
        "budget": total,
        "steps": curves[-1]["step"],
        "best_step": best["step"],
        "best_val_loss": best["val_loss"],
        "lr_fraction": curves[-1]["lr_fraction"],
        "seconds": None,
        "source": str(folder.relative_to(wh.root)),
    }


def first(settings, policy: Policy, stage: str, out: Path, test, reuse: bool) -> dict:
    """The 1x run's row: the warehouse's own where ``reuse`` (``--reuse-warehouse``) finds it (``from_warehouse``;
    ``test`` scores its adapter where it is given), else trained into ``out`` (``run``)."""
    row = from_warehouse(settings, policy, stage) if reuse else None
    if row is None:
        return run(settings, policy, stage, 1, out, None, test)
    if test is not None and stage == "finetune":
        row |= test.score(scaled(settings, 1, stage), policy, settings.warehouse.adapter_dir(policy), None)
    return row


class TestDays:
    """Scores an adapter's kept state as the report scores the universe (``stages.scaling_scores.score_universe``):
    the daily rank IC of p_buy - p_sell against the next close-to-close return and the log-loss skill over the fold's
    training base rates, on the fold's test days. The test days choose nothing: they only show what the kept state
    (chosen on validation) scores."""

    def __init__(self, settings):
        from kinematic_pipeline.stages.base_rates import CLOSE, train_base_rates

        self.rates = train_base_rates(settings)[CLOSE]

    def score(self, settings, policy: Policy, out: Path, foundation: Path | None) -> dict:
        from kinematic_pipeline.folds import evaluation_days
        from kinematic_pipeline.stages.scaling import adapter_scores

        days = evaluation_days(settings, policy.variant.token_asset, policy.fold)
        kept = foundation or settings.warehouse.foundation_checkpoint(policy)
        scores, _ = adapter_scores(settings, policy, out, kept, days, self.rates)
        return {"test_rank_ic": scores["rank_ic"], "test_logloss_skill": scores["logloss_skill"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fold", help="a walk-forward fold (default: the first)")
    parser.add_argument("--seeds", type=int, nargs="+", help="at least two (default: the profile's first two)")
    parser.add_argument("--tau", type=float, default=0.01)
    parser.add_argument(
        "--task",
        help="the adapters' task: a task's key (vol5) or a tau (default: Buy/Sell/Hold at --tau); its fine-tuning "
        "rows are kept and reported apart from another task's",
    )
    parser.add_argument("--variants", nargs="+")
    parser.add_argument(
        "--stages",
        nargs="+",
        default=list(STAGES),
        choices=STAGES,
        help="warm_start: the fold after --fold, continuing from the warehouse's --fold foundation (materialize it "
        "first) for train.warm_start_steps against twice that",
    )
    parser.add_argument("--no-ablation", action="store_true", help="skip fine-tuning from a random backbone")
    parser.add_argument(
        "--pretrain-horizon",
        type=int,
        help="also pretrain each GPT family's foundation with the target h tokens ahead (model.gpt.pretrain_horizon) at "
        "the 1x budget and fine-tune from it: the ablation's third column",
    )
    parser.add_argument(
        "--finetune-lr",
        type=float,
        help="LoRA's learning rate (train.finetune_lr) for this run only: a run at another rate than the profile's "
        "does not write the report's table",
    )
    parser.add_argument("--head-lr", type=float, help="the head's learning rate (train.head_lr) for this run only")
    parser.add_argument("--lr", type=float, help="pretraining's learning rate (train.lr) for this run only")
    parser.add_argument(
        "--ablation-seeds",
        type=int,
        default=1,
        help="fine-tune from a random backbone on the first N seeds (each against its own 1x adapter): the "
        "ablation's mean and sd over seeds",
    )
    parser.add_argument(
        "--test-days",
        action="store_true",
        help="score the ablation's adapters (from the foundation, from a random backbone) on the fold's test days: "
        "rank IC and log-loss skill (Buy/Sell/Hold)",
    )
    parser.add_argument(
        "--downstream",
        action="store_true",
        help="judge each pretraining budget by its adapter too: fine-tuned from the 1x and from the 2x foundation "
        "(of --task), the same test over the seeds",
    )
    parser.add_argument("--fresh", action="store_true", help="train every run again (default: reuse the kept ones)")
    parser.add_argument(
        "--reuse-warehouse",
        action="store_true",
        help="each 1x run is the warehouse's own model where the DAG trained it under these settings (its curves; "
        "checked as a load checks it): only the 2x runs and the ablation train",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = load_settings()
    given = (("lr", args.lr), ("finetune_lr", args.finetune_lr), ("head_lr", args.head_lr))
    rates = {k: v for k, v in given if v is not None}
    settings = dataclasses.replace(settings, train=dataclasses.replace(settings.train, **rates))
    args.task = named_task(settings, args.task) if args.task else run_task(settings, args.tau)
    args.tag = "" if args.task == run_task(settings, 0.01) else f"_{args.task.key}"  # the names the rows had before
    if args.test_days and not isinstance(args.task, BuySellHold):
        parser.error(f"--test-days scores Buy/Sell/Hold adapters (rank IC of p_buy - p_sell), not {args.task.key}")
    kept = None if args.fresh else settings.warehouse.reports_dir / "budget_runs" / fingerprint(settings)
    cache = Runs(kept)
    test = TestDays(settings) if args.test_days else None
    folds = fold_names(settings)
    fold = args.fold or folds[0]
    later = folds[folds.index(fold) + 1 :] if fold in folds else []
    if "warm_start" in args.stages and not later:
        print(f"no fold after {fold}: the warm-start budget is not tested")
        args.stages = [stage for stage in args.stages if stage != "warm_start"]
    seeds = args.seeds or list(settings.train.seeds[:2])
    if len(seeds) < 2:
        seeds = [seeds[0], seeds[0] + 1]  # a one-seed profile: its seed and the next
    seed = seeds[0]  # the ablation's
    variants = args.variants or list(settings.train.variants)
    print(
        f"profile {settings.profile}, warehouse {settings.warehouse}, fold {fold}, seeds {seeds}, task {args.task.key}, "
        f"schedule {settings.train.schedule}, "
        f"lr {settings.train.lr:g}, finetune_lr {settings.train.finetune_lr:g}, head_lr {settings.train.head_lr:g}"
    )
    print(
        "| family | stage | seed | budget 1x: steps (best), lr left | best val loss 1x | budget 2x: steps (best), lr left | "
        "best val loss 2x | 2x better by | verdict over the seeds |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows, ablation = [], []
    with tempfile.TemporaryDirectory() as temporary:
        tmp = Path(temporary)
        weights = tmp if kept is None else kept / "foundations"  # the 2x foundations: --downstream's
        for variant in variants:
            for stage in args.stages:
                on = later[0] if stage == "warm_start" else fold
                family = []
                for s in seeds:
                    seeded = Foundation.named(settings.folds, variant, s, on)
                    policy = seeded.on(args.task) if stage == "finetune" else seeded
                    name = f"{variant}_{stage}_{on}_{s}{args.tag if stage == 'finetune' else ''}"
                    scored = test if scored_on_test_days(stage, s, seeds, args) else None
                    one, two = (
                        cache.get(
                            f"{name}_{k}x{'_test' if k == 1 and scored else ''}",
                            lambda k=k, p=policy, g=stage, n=name, t=scored: (
                                first(settings, p, g, tmp / f"{n}_1x", t, args.reuse_warehouse)
                                if k == 1
                                else run(
                                    settings, p, g, k, emptied((weights if g == "pretrain" else tmp) / f"{n}_{k}x")
                                )
                            ),
                        )
                        for k in (1, 2)
                    )
                    family.append(paired_row(variant, stage, on, s, one, two, f"{stage} {on}"))
                rows += judged(family, variant, f"{stage} {on}")
                if stage == "pretrain" and args.downstream:
                    rows += downstream(settings, variant, on, seeds, cache, tmp, weights, args)
                if stage != "finetune" or args.no_ablation:
                    continue
                for row in family[: args.ablation_seeds]:
                    s = row["seed"]
                    policy = Foundation.named(settings.folds, variant, s, on).on(args.task)
                    cold = cache.get(
                        f"{variant}_{on}_{s}{args.tag}_from_random{'_test' if test else ''}",
                        lambda p=policy: from_random(settings, p, tmp, test),
                    )
                    ablation.append({"variant": variant, "seed": s, "from foundation": row["1x"], "from random": cold})
                    if args.pretrain_horizon and lookup_variant(variant).backbone == "gpt" and s == seed:
                        h = args.pretrain_horizon
                        ablation[-1]["horizon"] = cache.get(
                            f"{variant}_{on}_{s}{args.tag}_horizon{h}",
                            lambda p=policy, h=h: from_horizon(settings, p, h, tmp),
                        )
        print()
        print(
            "Does pretraining help? The adapter from its foundation against the same fine-tuning from a random backbone"
        )
        h = args.pretrain_horizon
        print(
            "| family | seed | from the foundation: best val loss (best step) | from a random backbone | "
            "pretraining lowers it by |"
            + (f" from a foundation pretrained {h} tokens ahead | which lowers it by |" if h else "")
        )
        print("| --- | --- | --- | --- | --- |" + (" --- | --- |" if h else ""))
        for row in ablation:
            warm, cold = row["from foundation"], row["from random"]
            gain = (cold["best_val_loss"] - warm["best_val_loss"]) / abs(cold["best_val_loss"])
            row["gain"] = gain
            line = (
                f"| {row['variant']} | {row['seed']} | {warm['best_val_loss']:.5f} ({warm['best_step']}) | "
                f"{cold['best_val_loss']:.5f} ({cold['best_step']}) | {100 * gain:+.2f}% |"
            )
            if "test_rank_ic" in warm and "test_rank_ic" in cold:
                line += (
                    f" test: rank IC {warm['test_rank_ic']:+.4f} / {cold['test_rank_ic']:+.4f}, log-loss skill "
                    f"{warm['test_logloss_skill']:+.5f} / {cold['test_logloss_skill']:+.5f} (foundation / random) |"
                )
            if "horizon" in row:
                far = row["horizon"]["finetune"]
                row["horizon_gain"] = (cold["best_val_loss"] - far["best_val_loss"]) / abs(cold["best_val_loss"])
                line += f" {far['best_val_loss']:.5f} ({far['best_step']}) | {100 * row['horizon_gain']:+.2f}% |"
            elif h:
                line += " - | - |"
            print(line)
        for variant in dict.fromkeys(row["variant"] for row in ablation):
            gains = [100 * row["gain"] for row in ablation if row["variant"] == variant]
            if len(gains) > 1:
                mean, sd = statistics.mean(gains), statistics.stdev(gains)
                print(f"| {variant} | {len(gains)} seeds | | | {mean:+.2f}% (sd {sd:.2f}%) |")
    if cache.reused:
        print(f"{cache.reused} runs reused from {cache.folder} (--fresh trains them again)")
    if args.json:
        args.json.write_text(json.dumps({"budget": rows, "pretraining": ablation}, indent=2))
    if rates:
        print("learning rates other than the profile's: the report's budget table is left as it was")
        return
    path = write_budget_test(settings, fold, rows, ablation, args.task.key)
    print(f"wrote {path}: the report shows it from its next materialize")


def steps_text(row: dict) -> str:
    """'budget: steps (best step), lr x<fraction of the peak left at the stop>' of one run's row."""
    return f"{row['budget']}: {row['steps']} ({row['best_step']}), lr x{row.get('lr_fraction', float('nan')):.2f}"


def write_budget_test(settings, fold: str, rows: list, ablation: list, task: str = "0.01") -> Path:
    """``<warehouse>/reports/budget_test.parquet``, the report's budget-test table: one row per family, stage and
    seed, each with its family's verdict over the seeds (``passes``) and the seeds' spread relative to the 1x mean
    (``tolerance``); an adapter's row (``TASK_STAGES``) names its ``task`` (its key), a foundation's none ("")."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    cold = {(row["variant"], row.get("seed", rows[0]["seed"])): row for row in ablation}  # first seed's, by default
    records = []
    for row in rows:
        one, two = row["1x"], row["2x"]
        random = cold.get((row["variant"], row["seed"])) if row["stage"] == "finetune" else None
        records.append(
            {
                "variant": row["variant"],
                "stage": row["stage"],
                "task": task if row["stage"] in TASK_STAGES else "",
                "fold": row.get("fold", fold),
                "seed": row["seed"],
                **{f"{k}_{x}": run.get(k) for x, run in (("1x", one), ("2x", two)) for k in RUN_FIELDS},
                "gain": row["gain"],
                "tolerance": row["tolerance"],
                "passes": row["passes"],
                "random_best_val_loss": None if random is None else random["from random"]["best_val_loss"],
                "pretraining_gain": None if random is None else random["gain"],
                "horizon": None if random is None or "horizon" not in random else random["horizon"]["horizon"],
                "horizon_best_val_loss": (
                    None
                    if random is None or "horizon" not in random
                    else random["horizon"]["finetune"]["best_val_loss"]
                ),
                "horizon_gain": None if random is None else random.get("horizon_gain"),
                "commit": commit.stdout.strip() or "unknown",
            }
        )
    nullable = ("random_best_val_loss", "pretraining_gain", "horizon_best_val_loss", "horizon_gain")
    nullable += tuple(f"{k}_{x}" for k in ("lr_fraction", "seconds") for x in ("1x", "2x"))  # a warehouse run's seconds
    frame = pl.DataFrame(records, schema_overrides={**dict.fromkeys(nullable, pl.Float64), "horizon": pl.Int64})
    return merge_budget_test(settings.warehouse, frame)


def merge_budget_test(wh, frame: pl.DataFrame) -> Path:
    """Writes ``frame``'s rows into ``wh.budget_test_file`` in place of the rows of the same family, stage, task, fold
    and 1x budget, keeping every other: two invocations side by side with disjoint ``--variants`` (the module
    docstring) each add their families, under one lock, rather than the second overwriting the first's; one ``--task``
    another's; a budget (``KP_FINETUNE_STEPS=600``: 600 against 1,200) the one it was measured against."""
    from kinematic_pipeline.warehouse.day_units import day_lock

    path, key = wh.budget_test_file, ["variant", "stage", "task", "fold", "budget_1x"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with day_lock(wh, "budget_test", "merge"):  # read, merge and write as one step
        if path.exists():
            kept = pl.read_parquet(path)
            if "task" not in kept.columns:  # written before the column: its adapters were Buy/Sell/Hold's at 0.01
                adapter = pl.col("stage").is_in(list(TASK_STAGES))
                kept = kept.with_columns(task=pl.when(adapter).then(pl.lit("0.01")).otherwise(pl.lit("")))
            kept = kept.join(frame.select(key).unique(), on=key, how="anti")
            frame = pl.concat([kept, frame], how="diagonal_relaxed").sort([*key, "seed"])
        wh.write(frame, path)  # atomic, as every warehouse file: a report never reads half of it
    return path


RUN_FIELDS = ("budget", "steps", "best_step", "best_val_loss", "lr_fraction", "seconds")


if __name__ == "__main__":
    main()
