"""The volatility task's probes against the references on a materialized warehouse, read only: each probe (LR as a
Gamma GLM and LightGBM's gamma trees, on each tokenization's features) refitted in memory by this checkout's code on
every fold's training rows, its next-week log-variance forecasts on the run's test tickers and universe sample, and
vol20, EWMA, GARCH and HAR refitted per fold on the same ticker-days; the forecasters' table (QLIKE with its block
interval, R^2, vol-rank IC, Diebold-Mariano against HAR, the model confidence set). Nothing is written.

    KP_SOURCE_PATH=... KP_MEMBERSHIP_FILE=... python benchmarks/vol_probes_real.py --warehouse <real warehouse>
"""

from __future__ import annotations

import argparse
import os
import time

import polars as pl

from kinematic_pipeline.backtest.volatility_evidence import forecaster_table, scored_forecasts
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.base import evaluation_tickers, universe_tickers
from kinematic_pipeline.predictors.families import predictor
from kinematic_pipeline.stages.baselines import train_probe
from kinematic_pipeline.stages.task_evidence import task_bars
from kinematic_pipeline.tasks.volatility import RealizedVariance
from kinematic_pipeline.variants import probes
from kinematic_pipeline.variants import variant as lookup_variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--profile", default="real")
    parser.add_argument("--horizon", type=int, default=5)
    args = parser.parse_args()
    settings = load_settings(args.profile, warehouse=args.warehouse, env={**os.environ, "KP_TASKS": "bsh,vol"})
    task = RealizedVariance(args.horizon)
    frames, started = [], time.perf_counter()
    for name in probes(settings.evaluated_variants):
        variant = lookup_variant(name)
        for fold in settings.folds:
            policy = Policy(name, task, 0, fold)
            model, fit = train_probe(settings, policy)
            days = settings.warehouse.shard_days(variant.token_asset)
            days = [d for d in days if d >= fold.test_start and (fold.test_end is None or d <= fold.test_end)]
            tickers = sorted(
                set(evaluation_tickers(settings, variant.token_asset, days))
                | set(universe_tickers(settings, variant.token_asset, days))
            )
            rows = predictor(variant).rows(settings, policy, "test", tickers, (model, fit))
            frames.append(
                rows.select("variant", "seed", "ticker", "date", "log_variance").with_columns(
                    pl.lit(fold.label).alias("fold")
                )
            )
            print(
                f"{name} {fold.label}: {fit['train_rows']} rows, {fit['iterations']} iterations, validation "
                f"QLIKE {fit['validation_qlike']:.4f}",
                flush=True,
            )
    predictions = pl.concat(frames)
    fitted = time.perf_counter() - started
    bars = task_bars(settings, predictions)
    scored, train_mean = scored_forecasts(predictions, bars, args.horizon, settings.folds)
    table = forecaster_table(scored, args.horizon, train_mean, reps=settings.evaluate.skill_bootstrap_resamples)
    print(
        f"\n{predictions['ticker'].n_unique()} names, {table['days'][0]} days, {table['rows'][0]} ticker-days; "
        f"probes fitted in {fitted:.0f} s, scored in {time.perf_counter() - started - fitted:.0f} s"
    )
    with pl.Config(tbl_rows=40, tbl_cols=16, tbl_width_chars=220, float_precision=4):
        print(table.drop("mse_variance", "dm_p", "kind"))


if __name__ == "__main__":
    main()
