"""The report's training tables, read from the curves each run wrote: each model's budget, steps run and best step;
and each family's fine-tuning skill over its prior at a quarter, a half and all of one budget (matched compute)."""

from __future__ import annotations

import csv
import math

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.training_table import learnability_table, training_table
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.training.curves import CURVE_COLUMNS, CURVES_FILE
from kinematic_pipeline_tests.helpers import benchmark


def _write_curves(folder, rows, fractions=None):
    folder.mkdir(parents=True, exist_ok=True)
    fractions = fractions or [math.nan] * len(rows)
    with open(folder / CURVES_FILE, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CURVE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for (step, val, best), fraction in zip(rows, fractions):
            writer.writerow(
                {
                    **dict.fromkeys(CURVE_COLUMNS, math.nan),
                    "lr_fraction": fraction,
                    "step": step,
                    "epoch": 0,
                    "windows": step,
                    "val_loss": val,
                    "best": best,
                }
            )


def test_a_model_stopped_while_improving_and_one_stopped_early_read_as_such(tmp_path):
    from kinematic_pipeline.policy import Policy

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    fold, seed, tau = settings.folds[0], settings.train.seeds[0], settings.evaluate.report_tau
    policy = Policy("splinegpt", BuySellHold(tau), seed, fold)
    wh = settings.warehouse
    _write_curves(wh.foundation_dir(policy), [(0, 0.9, False), (20, 0.5, False), (40, 0.3, True)])
    _write_curves(wh.adapter_dir(policy), [(0, 0.8, False), (20, 0.7, True), (40, 0.75, False), (60, 0.76, False)])

    table = training_table(settings)

    assert table.height == 2  # only the models that trained: no curves, no row
    foundation, adapter = table.rows(named=True)
    assert (foundation["Stage"], foundation["Fold"], foundation["Seed"]) == ("pretraining", fold.name, seed)
    assert (foundation["Steps run"], foundation["Best step"], foundation["Best val loss"]) == (40, 40, 0.3)
    assert foundation["Best at the last step"] == "yes"
    assert (
        foundation["Budget"] >= settings.train.pretrain_steps and foundation["Budget"] % settings.train.eval_every == 0
    )
    assert (adapter["Stage"], adapter["Steps run"], adapter["Best step"]) == ("fine-tuning", 60, 20)
    assert adapter["Best at the last step"] == "no"
    assert adapter["Budget"] >= settings.train.finetune_steps


def test_the_table_gives_the_rate_left_at_the_stop_and_a_warm_start_that_kept_its_parent(tmp_path):
    from kinematic_pipeline.model_pins import PARENT_FILE
    from kinematic_pipeline.policy import Policy

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    first, second = settings.folds[:2]
    seed, tau, wh = settings.train.seeds[0], settings.evaluate.report_tau, settings.warehouse
    parent, child = (Policy("splinegpt", BuySellHold(tau), seed, f) for f in (first, second))
    _write_curves(wh.foundation_dir(parent), [(0, 0.9, False), (20, 0.5, True), (40, 0.6, False)], [1.0, 1.0, 0.72])
    _write_curves(wh.foundation_dir(child), [(0, 0.4, True), (20, 0.41, False)], [0.2, 0.0])
    (wh.foundation_dir(child) / PARENT_FILE).write_text("{}")
    rows = {r["Fold"]: r for r in training_table(settings).rows(named=True) if r["Stage"].startswith("pretraining")}
    assert rows[first.name]["Stage"] == "pretraining" and rows[first.name]["LR left at the stop"] == 0.72  # stopped hot
    assert rows[second.name]["Stage"] == "pretraining, warm-started (kept its parent)"
    assert rows[second.name]["LR left at the stop"] == 0.0 and rows[second.name]["Best step"] == 0


def test_the_table_lists_the_volatility_tasks_adapters_beside_the_report_taus(tmp_path):
    from kinematic_pipeline.policy import Policy
    from kinematic_pipeline.run_keys import named_task

    settings = load_settings("demo", warehouse=tmp_path / "warehouse", env={})
    fold, seed, wh = settings.folds[0], settings.train.seeds[0], settings.warehouse
    bsh = Policy("splinegpt", BuySellHold(settings.evaluate.report_tau), seed, fold)
    vol = Policy("splinegpt", named_task(settings, "vol5"), seed, fold)
    swept = Policy("splinegpt", named_task(settings, "vol1"), seed, fold)  # a horizon the report does not read
    _write_curves(wh.foundation_dir(bsh), [(0, 0.9, False), (20, 0.5, True)])
    _write_curves(wh.adapter_dir(bsh), [(0, 0.8, False), (20, 0.7, True)])
    _write_curves(wh.adapter_dir(vol), [(0, 0.6, False), (20, 0.4, True), (40, 0.45, False)])
    _write_curves(wh.adapter_dir(swept), [(0, 0.6, False), (20, 0.5, True)])

    rows = training_table(settings).rows(named=True)

    assert [(r["Stage"], r["Task"]) for r in rows] == [
        ("pretraining", "-"),
        ("fine-tuning", "0.01"),
        ("fine-tuning", "vol5"),
    ]
    assert (rows[2]["Steps run"], rows[2]["Best step"], rows[2]["Best val loss"]) == (40, 20, 0.4)
    assert learnability_table(settings).row(0, named=True)["Runs"] == 1  # matched compute: the report's tau only


def test_no_trained_model_gives_no_table(tmp_path):
    assert training_table(load_settings("ci", warehouse=tmp_path / "warehouse", env={})) is None


def test_learnability_is_the_best_skill_over_the_prior_so_far_at_each_fraction_of_one_budget(tmp_path):
    from kinematic_pipeline.policy import Policy

    env = {"KP_FINETUNE_STEPS": "100", "KP_EVAL_EVERY": "25"}
    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env=env)
    fold, seed, tau = settings.folds[0], settings.train.seeds[0], settings.evaluate.report_tau
    wh = settings.warehouse
    curve = [(0, 1.0, False), (25, 0.9, False), (50, 0.95, False), (75, 0.8, True), (100, 0.85, False)]
    _write_curves(wh.adapter_dir(Policy("splinegpt", BuySellHold(tau), seed, fold)), curve)
    stopped = [(0, 1.0, True), (25, 1.01, False), (50, 0.98, False)]  # stopped early (patience) at step 50
    _write_curves(wh.adapter_dir(Policy("rawgpt_fd", BuySellHold(tau), seed, fold)), stopped)
    _write_curves(
        wh.foundation_dir(Policy("patchtst", BuySellHold(tau), seed, fold)), curve
    )  # pretraining: not compared

    rows = {r["Tokenization"]: r for r in learnability_table(settings).rows(named=True)}

    assert set(rows) == {"spline", "fd"} and rows["spline"]["Runs"] == 1
    spline, fd = rows["spline"], rows["fd"]
    assert [spline[f"Skill at {n} steps"] for n in (25, 50, 100)] == [0.1, 0.1, 0.2]  # the best so far, not the last
    assert [fd[f"Skill at {n} steps"] for n in (25, 50, 100)] == [0.0, 0.02, 0.02]
    assert (spline["Windows seen at 100 steps"], fd["Windows seen at 100 steps"]) == (100, 50)
    assert learnability_table(load_settings("ci", warehouse=tmp_path / "empty", env=env)) is None


def test_the_budget_test_the_benchmark_writes_reaches_the_report_table(tmp_path):
    from kinematic_pipeline.stages.training_table import budget_test_table

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    assert budget_test_table(settings) is None  # until the benchmark has run

    def run(budget, steps, best, loss, lr_fraction=0.0):
        row = {"budget": budget, "steps": steps, "best_step": best, "best_val_loss": loss, "seconds": 1.0}
        return row | {"lr_fraction": lr_fraction}

    rows = [  # a foundation that twice the budget improves by 5%, an adapter it improves by 0.5%
        {"variant": "splinegpt", "stage": "pretrain", "1x": run(300, 300, 300, 0.2), "2x": run(600, 600, 600, 0.19)},
        {"variant": "splinegpt", "stage": "finetune", "1x": run(200, 200, 150, 1.0), "2x": run(400, 400, 300, 0.995)},
        {  # --downstream: the same fine-tuning from the 1x and from the 2x foundation
            "variant": "splinegpt",
            "stage": "pretrain_downstream",
            "1x": run(200, 200, 150, 1.0),
            "2x": run(200, 200, 175, 0.999),
        },
        {  # the next fold's foundation, continuing from this fold's
            "variant": "splinegpt",
            "stage": "warm_start",
            "fold": "2022H2",
            "1x": run(100, 100, 100, 0.2),
            "2x": {"budget": 200, "steps": 150, "best_step": 75, "best_val_loss": 0.21},  # kept before the column
        },
    ]
    for row in rows:
        row["gain"] = (row["1x"]["best_val_loss"] - row["2x"]["best_val_loss"]) / row["1x"]["best_val_loss"]
        row.update(passes=row["gain"] <= 0.01, seed=1234, tolerance=0.01)  # the verdict over the seeds, their spread
    ablation = [{"variant": "splinegpt", "from foundation": rows[1]["1x"], "from random": run(200, 200, 100, 1.02)}]
    ablation[0]["gain"] = (1.02 - 1.0) / 1.02
    ablation[0]["horizon"] = {"horizon": 5, "pretrain": run(300, 300, 300, 0.4), "finetune": run(200, 200, 200, 0.99)}
    ablation[0]["horizon_gain"] = (1.02 - 0.99) / 1.02
    path = benchmark("bench_budget").write_budget_test(settings, "2022H1", rows, ablation)
    assert path == settings.warehouse.budget_test_file

    pretraining, finetuning, by_adapter, warm = budget_test_table(settings).rows(named=True)
    assert by_adapter["Stage"] == "pretraining, by its adapter (fine-tuned from the 1x / 2x foundation)"
    assert [r["Task"] for r in (pretraining, finetuning, by_adapter, warm)] == ["-", "0.01", "0.01", "-"]
    assert (by_adapter["Budget: steps (best)"], by_adapter["2x budget: steps (best)"]) == (
        "200: 200 (150)",
        "200: 200 (175)",
    )
    assert by_adapter["2x lowers it by"] == "+0.10%" and by_adapter["From a random backbone"] == "-"
    assert (warm["Stage"], warm["Fold"], warm["2x lowers it by"]) == ("pretraining, warm-started", "2022H2", "-5.00%")
    assert warm["Rate left at the stop (1x / 2x)"] == "0.00 / -"  # a run the benchmark kept before it recorded it
    assert (pretraining["Stage"], pretraining["Fold"], pretraining["Seed"]) == ("pretraining", "2022H1", 1234)
    assert pretraining["Budget: steps (best)"] == "300: 300 (300)" and pretraining["Best val loss at 2x"] == 0.19
    assert pretraining["2x lowers it by"] == "+5.00%" and pretraining["Passes"] == "no (seed spread 1.00%)"
    assert pretraining["From a random backbone"] == "-" and pretraining["Pretraining lowers it by"] == "-"
    assert finetuning["2x lowers it by"] == "+0.50%" and finetuning["Passes"] == "yes (seed spread 1.00%)"
    assert finetuning["From a random backbone"] == "1.02000" and finetuning["Pretraining lowers it by"] == "+1.96%"
    assert finetuning["From a foundation pretrained h ahead"] == "0.99000 (h=5: +2.94%)"
    assert pretraining["From a foundation pretrained h ahead"] == "-"


def test_two_benchmark_invocations_with_disjoint_families_both_reach_the_budget_test_file(tmp_path):
    """The benchmark's docstring runs two invocations side by side with disjoint ``--variants``: the second's write
    merges with the first's by family, stage and fold (it overwrote them before), and a family run again replaces
    only its own rows."""
    import polars as pl

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    bench = benchmark("bench_budget")

    def rows(variant, loss, seeds=(1234, 1235)):
        run = {"budget": 300, "steps": 300, "best_step": 300, "best_val_loss": loss, "seconds": 1.0, "lr_fraction": 0}
        return [
            {"variant": variant, "stage": "pretrain", "seed": s, "1x": run, "2x": run, "gain": 0.0}
            | {"tolerance": 0.01, "passes": True}
            for s in seeds
        ]

    bench.write_budget_test(settings, "2022H1", rows("splinegpt", 0.2), [])
    bench.write_budget_test(settings, "2022H1", rows("rawgpt_fd", 0.3), [])
    both = pl.read_parquet(settings.warehouse.budget_test_file)
    assert both.select("variant", "seed").rows() == [("rawgpt_fd", 1234), ("rawgpt_fd", 1235)] + [
        ("splinegpt", 1234),
        ("splinegpt", 1235),
    ]
    bench.write_budget_test(settings, "2022H1", rows("splinegpt", 0.25, seeds=(1236,)), [])
    again = pl.read_parquet(settings.warehouse.budget_test_file)
    assert again.filter(pl.col("variant") == "splinegpt").select("seed", "best_val_loss_1x").rows() == [(1236, 0.25)]
    assert again.filter(pl.col("variant") == "rawgpt_fd").height == 2


def test_a_budget_test_of_another_task_keeps_the_first_tasks_adapter_rows(tmp_path):
    """``bench_budget --task vol5``: its fine-tuning rows sit beside Buy/Sell/Hold's of the same family, stage and fold
    (they replaced them before), each named by its task; a table written before the task column reads as
    Buy/Sell/Hold's at 0.01, and a foundation's rows name no task."""
    import polars as pl

    from kinematic_pipeline.stages.training_table import budget_test_table

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    bench = benchmark("bench_budget")
    run = {"budget": 300, "steps": 300, "best_step": 300, "best_val_loss": 0.5, "seconds": 1.0, "lr_fraction": 0}

    def rows(stage):
        row = {"variant": "splinegpt", "stage": stage, "seed": 1234, "1x": run, "2x": run, "gain": 0.0}
        return [row | {"tolerance": 0.01, "passes": True}]

    bench.write_budget_test(settings, "2022H1", [*rows("pretrain"), *rows("finetune")], [])
    path = settings.warehouse.budget_test_file
    pl.read_parquet(path).drop("task").write_parquet(path)  # as the benchmark wrote it before the column
    bench.write_budget_test(settings, "2022H1", rows("finetune"), [], task="vol5")
    table = pl.read_parquet(path).sort("stage", "task")
    assert table.select("stage", "task").rows() == [("finetune", "0.01"), ("finetune", "vol5"), ("pretrain", "")]
    assert sorted(r["Task"] for r in budget_test_table(settings).rows(named=True)) == ["-", "0.01", "vol5"]
    longer = {**run, "budget": 600, "best_val_loss": 0.49}  # KP_FINETUNE_STEPS=600: 600 against 1,200
    bench.write_budget_test(settings, "2022H1", [{**rows("finetune")[0], "1x": longer}], [], task="vol5")
    bench.write_budget_test(settings, "2022H1", [{**rows("finetune")[0], "1x": longer}], [], task="vol5")  # again
    vol = pl.read_parquet(path).filter(task="vol5").sort("budget_1x")
    assert vol.select("budget_1x", "best_val_loss_1x").rows() == [(300, 0.5), (600, 0.49)]  # each budget's row kept


def test_learnability_on_test_days_reaches_the_report_table_once_the_benchmark_wrote_it(tmp_path):
    import polars as pl

    from kinematic_pipeline.stages.training_table import LEARNABILITY_TEST_SCHEMA, learnability_test_table

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    assert learnability_test_table(settings) is None  # until benchmarks/bench_learnability.py has run
    keys = {"variant": "splinegpt", "fold": "2022H1", "seed": 1234, "tau": 0.01, "commit": "abc1234"}
    scores = {"logloss_skill_ci_low": -0.01, "logloss_skill_ci_high": 0.03, "ci_block_days": 20, "test_rows": 900}
    rows = [
        {**keys, **scores, "learner": "transformer", "budget": 50, "step": 0, "windows": 0, "val_loss": 1.0,
         "val_skill": 0.0, "kept": False, "rank_ic": float("nan"), "rank_ic_t_nw": float("nan"), "logloss_skill": 0.0},
        {**keys, **scores, "learner": "transformer", "budget": 50, "step": 25, "windows": 3200, "val_loss": 0.98,
         "val_skill": 0.02, "kept": True, "rank_ic": 0.031, "rank_ic_t_nw": 2.5, "logloss_skill": 0.012},
        {**keys, **scores, "learner": "lr_spline", "windows": 150000, "rank_ic": 0.02, "rank_ic_t_nw": 1.9,
         "logloss_skill": 0.008},
    ]  # fmt: skip
    path = settings.warehouse.learnability_test_file
    path.parent.mkdir(parents=True)
    pl.DataFrame(rows, schema=LEARNABILITY_TEST_SCHEMA).write_parquet(path)
    prior, kept, probe = learnability_test_table(settings).rows(named=True)
    assert (prior["Step (budget)"], prior["Kept"], prior["Test rank IC (t, Newey-West)"]) == (
        "0 (50)",
        "no",
        "- (no ranking)",
    )
    assert (kept["Kept"], kept["Test rank IC (t, Newey-West)"], kept["Windows seen"]) == (
        "yes",
        "+0.0310 (+2.50)",
        3200,
    )
    assert kept["Test log-loss skill [95% CI]"] == "+0.01200 [-0.01000, +0.03000]"
    assert (probe["Model"], probe["Step (budget)"], probe["Validation skill over the prior"]) == (
        "Logistic regression (Spline)", "fitted", None,
    )  # fmt: skip


def test_the_budget_benchmark_keeps_each_run_and_reuses_it_when_run_again(tmp_path):
    """A benchmark of hours stopped half-way runs again only what it had not finished: each run's row is kept whole
    under its name; with no folder nothing is kept."""
    made = []

    def make(loss):
        def train():
            made.append(loss)
            return {"best_val_loss": loss}

        return train

    runs = benchmark("bench_budget").Runs(tmp_path / "runs")
    assert runs.get("a_1x", make(0.5)) == {"best_val_loss": 0.5}
    assert runs.get("a_1x", make(0.7)) == {"best_val_loss": 0.5}  # kept: not trained again
    assert runs.get("a_2x", make(0.4)) == {"best_val_loss": 0.4}
    assert made == [0.5, 0.4] and runs.reused == 1
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["a_1x.json", "a_2x.json"]  # no staged leftovers
    nothing = benchmark("bench_budget").Runs(None)
    nothing.get("a_1x", make(0.9))
    assert made[-1] == 0.9 and nothing.reused == 0
