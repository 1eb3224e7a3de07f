"""The probes' cost on a profile's warehouse: every probe fitted at one tau, the universe predictions, timed.

    python benchmarks/bench_probes.py [--profile real] [--warehouse DIR] [--tau 0.01] [--out DIR]

Needs a warehouse whose features files exist (``<tokenization>_features``: e.g. after
``KP_PROFILE=real ... python -m kinematic_pipeline materialize``). Fits each probe of ``evaluate.baselines`` at
``--tau`` with the real code path (``stages.baselines.materialize_probe``: the same features, scaler, class weights and
early stopping) into ``--out`` (a scratch copy of the model folders: the warehouse's own probes are not
touched; its ``features/`` is a link to the warehouse's), predicts the universe rows of the test period with it, and reports the seconds of each step. The
reference, measured in the same run, is one read of the spline features file's training rows (what a fit
must at least do): each fit is reported as a multiple of it. Target: all the probes in minutes (the issue:
"minutes, not tens of minutes").
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lightgbm  # noqa: E402, F401  (imported before the clock starts)
import polars as pl  # noqa: E402
import sklearn.linear_model  # noqa: E402, F401

from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.policy import Policy  # noqa: E402
from kinematic_pipeline.predictors.families import predictor  # noqa: E402
from kinematic_pipeline.run_keys import run_task  # noqa: E402
from kinematic_pipeline.stages.baselines import materialize_probe  # noqa: E402
from kinematic_pipeline.variants import probes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="real")
    parser.add_argument("--warehouse", default=None)
    parser.add_argument("--tau", type=float, default=0.01)
    parser.add_argument("--out", default=None, help="scratch folder for the fitted probes (default: a temp dir)")
    args = parser.parse_args()
    settings = load_settings(args.profile, warehouse=args.warehouse)
    # a scratch warehouse whose features/ is the warehouse's: the fitted probes land in the scratch folder
    scratch = Path(args.out or tempfile.mkdtemp(prefix="bench_probes."))
    scratch.mkdir(parents=True, exist_ok=True)
    if not (scratch / "features").exists():
        (scratch / "features").symlink_to(settings.warehouse.root / "features", target_is_directory=True)
    settings = dataclasses.replace(settings, warehouse=scratch)
    fitted = probes(settings.evaluate.baselines)

    started = time.perf_counter()
    path = settings.warehouse.features_file("spline", "training")
    train = pl.scan_parquet(path).filter(pl.col("split") == "train").collect()
    reference = time.perf_counter() - started
    print(f"reference: one read of the spline features' {train.height:,} training rows: {reference:.2f} s")
    del train

    total_fit = total_predict = 0.0
    print(
        f"{'probe':<18} {'fit s':>8} {'x ref':>7} {'iters':>6} {'val loss':>9} {'universe rows':>14} {'predict s':>10}"
    )
    for variant in fitted:
        policy = Policy(variant, run_task(settings, args.tau), 0, settings.folds[0])
        started = time.perf_counter()
        fit = materialize_probe(settings, policy).fit
        fit_s = time.perf_counter() - started
        started = time.perf_counter()
        rows = predictor(policy.variant).rows(settings, policy, "test", None).height
        predict_s = time.perf_counter() - started
        total_fit, total_predict = total_fit + fit_s, total_predict + predict_s
        print(
            f"{variant:<18} {fit_s:>8.1f} {fit_s / reference:>7.1f} {fit['iterations']:>6} "
            f"{fit['validation_weighted_log_loss']:>9.4f} {rows:>14,} {predict_s:>10.1f}"
        )
    print(f"all {len(fitted)} probes: fit {total_fit / 60:.1f} min, universe predictions {total_predict:.0f} s")


if __name__ == "__main__":
    main()
