"""The named profiles: ``ci``, ``demo``, ``real`` and ``paper``, each a ``Settings`` before any environment
override (``KP_PROFILE`` picks one; ``environment.load_settings`` applies the rest). Nothing here imports dagster.
"""

from __future__ import annotations

import datetime as dt

from kinematic_pipeline.config.backbones import GPTConfig, ModelConfig, PatchTSTConfig
from kinematic_pipeline.config.settings import (
    DataConfig,
    EvalConfig,
    Settings,
    SplitConfig,
    SyntheticConfig,
    TokenizeConfig,
    TrainConfig,
)

PROFILES = ("ci", "demo", "real", "paper")
PAPER_TEST_TICKERS = ("INTC", "NVDA", "JPM", "XOM", "PFE", "TSLA")  # the paper's backtest universe


# The backbones of the CPU profiles (demo, real): d_model 64 / d_ff 256 (paper: 512 / 2048), PatchTST alike.
# No dropout (paper: 0.1; LoRA's 0.05 likewise, CPU_LORA_DROPOUT): a CPU budget of a few hundred steps draws fresh
# windows for nearly every step (an epoch is a new sample of a corpus of 10^5-10^6 windows), so there is nothing
# to memorise that dropout would guard, and early stopping on validation days keeps the best state. Its masks cost
# a third of a step on 2 cores (bench_training.py: 175 -> 113 ms a pretraining step, 244 -> 148 ms fine-tuning).
CPU_LORA_DROPOUT = 0.0
SMALL_CPU_MODEL = ModelConfig(
    gpt=GPTConfig(d_model=64, n_layers=4, n_heads=4, d_ff=256, dropout=0.0),
    patchtst=PatchTSTConfig(d_model=64, n_heads=4, n_layers=2, d_ff=256, dropout=0.0),
)


# The demo's: half the width of the CPU profiles' (d_model 32 / d_ff 128) and two heads of 16 (four heads of 8 cost
# a third more a step at one thread: the fused attention kernel's work per head, not the FLOPs): a first look in
# minutes.
DEMO_MODEL = ModelConfig(
    gpt=GPTConfig(d_model=32, n_layers=4, n_heads=2, d_ff=128, dropout=0.0),
    patchtst=PatchTSTConfig(d_model=32, n_heads=2, n_layers=2, d_ff=128, dropout=0.0),
)


def _profile_ci() -> Settings:
    return Settings(
        profile="ci",
        model=ModelConfig(
            gpt=GPTConfig(d_model=32, n_layers=4, n_heads=4, d_ff=64, dropout=0.0),
            patchtst=PatchTSTConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0),
        ),
        train=TrainConfig(
            pretrain_steps=300,
            finetune_steps=200,
            eval_every=20,
            patience=4,
            # the cosine that stops at the stall, as when its golden numbers were written on three platforms
            # (kinematic_pipeline_tests/golden); every other profile anneals to 0 (wsd)
            schedule="cosine",
            warm_start_rate=None,  # likewise: fold 2022H2's foundation restarts at the peak with a fresh optimizer
            batch_size=64,
            max_windows_per_epoch=2048,
            val_fraction=0.2,  # ~190 validation windows a fold (10%: 91, 7 Sell): too few to stop on
            lora_rank=4,
            lora_alpha=8,
            seeds=(1234, 1235),  # two seeds: the report's mean +- std and per-seed tables are exercised in CI
        ),
        # two walk-forward folds: the half-years 2022H1 and 2022H2 (folds.py), pooled in the report; the tau sweep
        # on the last fold with the first seed (the report's tau on every fold and seed): 28 adapters instead of 64
        # (40 with both seeds' sweeps: 3.5 more minutes of CI's DAG lane for rows that test nothing new)
        split=SplitConfig(folds=2, fold_period="half", tau_sweep_folds="last", tau_sweep_seeds="first"),
        evaluate=EvalConfig(
            baseline_taus=(0.01,),  # the probes and rules at the report's tau, as in demo and real
            skill_bootstrap_resamples=200,
            verdict_bootstrap_resamples=300,
            scaling_windows=(256, 1024, 4096),  # a fold holds ~700 labelled training windows: 0.4 to 6 epochs
        ),
    )


def _profile_demo() -> Settings:
    return Settings(
        profile="demo",
        data=DataConfig(start_date=dt.date(2018, 1, 2), end_date=dt.date(2022, 12, 30)),
        synthetic=SyntheticConfig(n_tickers=32),
        # both tasks, as real: Buy/Sell/Hold and next-week volatility
        tokenize=TokenizeConfig(tasks=("bsh", "vol")),
        model=DEMO_MODEL,
        # a first look in about 10 minutes on 2 CPU cores from a fresh clone, the install included (issue 56): 4
        # foundations and 24 adapters (4 taus and 2 volatility horizons a family), one a core at one thread each
        train=TrainConfig(
            pretrain_steps=300,
            # the 2x test over two seeds, every seed validated on the fold's one sample (bench_budget, KP_PRETRAIN_STEPS,
            # KP_FINETUNE_STEPS; docs/results/2026-12-04.md, stop 69): fine-tuning at 480 for every family (120 failed
            # for SplineGPT and RawGPT-FD, 240 for RawGPT-FD and RawGPT); pretraining at 300, SplineGPT's at 600 and
            # PatchTST's masked patches at 2400 pass, RawGPT's fails at 300 and at 600 (its seeds agree to 0.00002,
            # the test's tolerance 0.00013: doubling moves it by -0.22%, then +0.11%)
            steps_of=(("splinegpt", "pretrain", 600), ("patchtst", "pretrain", 2400)),
            # pretraining at 5e-3 (the paper's 6e-4 is for d_model 512): at 300 steps SplineGPT's validation loss is
            # 0.0174 against 0.0280 (0.0196 at 600 steps of 6e-4), and RawGPT-FD passes the 2x budget test it failed
            # (bench_budget --stages pretrain --lr, docs/results/2026-12-03.md, stop 65)
            lr=5e-3,
            finetune_steps=480,
            eval_every=20,
            patience=3,
            batch_size=64,
            max_windows_per_epoch=4096,
            finetune_max_windows_per_epoch=2048,
            max_val_windows=512,
            lora_dropout=CPU_LORA_DROPOUT,
            side_by_side=None,
        ),
        # the probes and rules at the report's tau only, as in real (the tau sweep is the transformers')
        evaluate=EvalConfig(baseline_taus=(0.01,), skill_bootstrap_resamples=200, verdict_bootstrap_resamples=300),
    )


def _profile_paper() -> Settings:
    # The paper's corpus: real bars from 2000, training through 2022-12-31.
    return Settings(
        profile="paper",
        data=DataConfig(
            source="parquet",
            start_date=dt.date(2000, 1, 3),
            end_date=None,
        ),
        split=SplitConfig(train_end=dt.date(2022, 12, 31)),
        synthetic=SyntheticConfig(n_tickers=100),
        evaluate=EvalConfig(test_tickers=PAPER_TEST_TICKERS, focus_ticker="NVDA", responsiveness_ticker="XOM"),
    )


def _profile_real() -> Settings:
    """The paper's protocol on the real S&P 500 file, sized for one 2-core, 24 GB workstation.

    The development split uses only our data (2000-2022): four walk-forward folds testing 2019, 2020, 2021 and
    2022 on the paper's six tickers, each trained on everything before its year less a 65-session embargo (the
    last 10% of its training days validate); the report pools them into one 2019-2022 record per policy. Scaled down
    from the paper: the backbones (d_model 64 instead of 512, d_ff 256 instead of 2048; PatchTST likewise), the training
    windows (a capped sample per epoch instead of every window) and the epochs (docs/profiles.md)."""
    return Settings(
        profile="real",
        data=DataConfig(
            source="parquet",
            start_date=dt.date(2000, 1, 3),
            end_date=None,
        ),
        # walk-forward: the test years 2019, 2020, 2021, 2022, each trained on everything before it less a
        # 65-session embargo. The tau sweep is outside the whole-DAG run, which it would lengthen by ~8 min (12
        # policies): KP_TAU_SWEEP_FOLDS=last adds it on the last fold with the first seed only (the report's tau
        # stays on every fold and seed)
        split=SplitConfig(
            train_end=dt.date(2018, 12, 31),
            folds=4,
            fold_period="year",
            tau_sweep_folds="none",
            tau_sweep_seeds="first",
        ),
        # both tasks: Buy/Sell/Hold and next-week volatility (issue 53: the task whose answer can tell tokenizations
        # apart); the next-day horizon of volatility is swept like the taus (outside the whole-DAG run)
        tokenize=TokenizeConfig(tasks=("bsh", "vol")),
        model=SMALL_CPU_MODEL,
        # four walk-forward folds x 3 seeds (the replicates every tokenization row needs: a "yes" takes 3 agreeing
        # seeds) x 4 models: 48 foundations, 48 Buy/Sell/Hold adapters and 48 volatility adapters, trained to their
        # best validation step on 2 cores; KP_SEEDS=1234 is the one-seed run of the earlier measurements
        train=TrainConfig(
            # each budget by the two-sided 2x test over 3 seeds on fold 2019, every run annealed to 0 by the wsd
            # schedule (benchmarks/bench_budget.py; docs/results/2026-12-05.md). Pretraining fails on its own loss
            # (SplineGPT, RawGPT-FD, RawGPT, PatchTST: 2x lower by 0.2-5%) but passes by what it is for: the adapters
            # fine-tuned from the 1x and the 2x foundation do not differ beyond the seeds, on either task
            pretrain_steps=1600,
            # folds 2-4 continue from the previous fold's foundation for 100 steps: every family passes the 2x test
            warm_start_steps=100,
            # 300 failed for 4 of the 8 families x tasks (SplineGPT and RawGPT on Buy/Sell/Hold, SplineGPT and
            # RawGPT-FD on volatility: 2x lower by 0.3-2%); 600 against 1,200 passes for SplineGPT on both tasks and
            # RawGPT on Buy/Sell/Hold, not for RawGPT-FD on volatility (-1.35%); 1,200 against 2,400 passes for it
            # (-0.12%). One budget for every family, the largest any needs, so that no comparison of tokenizations is
            # one of budgets. 1,200 against 2,400, every family and task: 7 of 8 pass; SplineGPT on Buy/Sell/Hold
            # fails (-0.25%, every seed lower, against a seed spread of 0.22%) and passes at 2,400 against 4,800
            # (-0.03%). Its 2,400 for every family would add ~38 min to `real` (the adapters' steps x1.43), on the
            # task where no family has skill (docs/results/2026-12-05.md, "Every family at 1,200")
            finetune_steps=1200,
            eval_every=25,
            patience=3,
            batch_size=128,
            max_windows_per_epoch=4096,
            finetune_max_windows_per_epoch=2048,
            max_val_windows=2048,
            lora_dropout=CPU_LORA_DROPOUT,
            seeds=(1234, 1235, 1236),
            side_by_side=None,  # one run a usable core, at one thread each
        ),
        # Within one hour on 2 cores: the probes at the report's tau only, and the universe tables on a fixed
        # sample of 50 tickers (every variant on the same ticker-days; the models' forward passes set the cost).
        evaluate=EvalConfig(
            test_tickers=PAPER_TEST_TICKERS,
            focus_ticker="NVDA",
            responsiveness_ticker="XOM",
            baseline_taus=(0.01,),
            universe_tickers=50,
            skill_bootstrap_resamples=250,  # day resamples of the universe skill intervals (100k rows a policy)
            probe_max_train_rows=150_000,  # of ~1.3-2 M labelled training ticker-days: 4 folds x 8 probes fit the hour
            # the data-scaling curves (issue 28): 4k to 64k windows (32 to 512 fine-tuning steps); outside the whole-DAG
            # run, which they would lengthen by ~10 min with two seeds: `materialize --select scaling_curves` adds them
            scaling_windows=(4096, 16384, 65536),
        ),
    )


_PROFILE_FACTORIES = {"ci": _profile_ci, "demo": _profile_demo, "real": _profile_real, "paper": _profile_paper}


def profile_settings(name: str) -> Settings:
    """The named profile's settings, before any environment override."""
    if name not in _PROFILE_FACTORIES:
        raise ValueError(f"unknown profile {name!r}: expected one of {', '.join(PROFILES)}")
    return _PROFILE_FACTORIES[name]()
