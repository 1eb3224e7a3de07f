"""Compute-optimal model size at equal wall time: which backbone width reaches the lowest validation loss when each
trains for the same seconds on this machine?

    python benchmarks/bench_model_size.py [--source-path ../shared/data/sp500_daily_2000_2022.parquet]
        [--start 2014-01-02] [--end 2018-12-31] [--seconds 90] [--sizes 64 128 256] [--json PATH]

With ``--source-path`` the corpus is the real file (the ``real`` profile's tokenization and window store) over
``--start`` .. ``--end`` (a shorter history than the profile's keeps the not-timed build short); without it, the
demo profile's synthetic universe. Each width d trains SplineGPT's pretraining objective (next-token MSE, the
profile's 4 layers and 4 heads, d_ff = 4 d, no dropout) from the same seed on the same sampled windows: the step
time is measured first (5 steps after a warm-up), the step budget is the seconds over it, and the run is AdamW with
the profile's learning rate, warmup and cosine over that budget (what ``pretrain`` does), its validation loss taken
every tenth of the budget on the same validation windows (the last 10% of training days, at most 2,048 windows).
The best validation loss and its step are reported per width, with the parameters and the FLOPs of a step.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench_training import ensure_warehouse, step_flops  # noqa: E402

from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.models import build_model  # noqa: E402
from kinematic_pipeline.policy import Foundation  # noqa: E402
from kinematic_pipeline.training.data import WindowDataModule  # noqa: E402
from kinematic_pipeline.training.modules import adamw_with_cosine, warmup_steps  # noqa: E402
from kinematic_pipeline.training.trainer import configure_threads  # noqa: E402

VARIANT = "splinegpt"
EVALUATIONS = 10  # validation passes over a width's budget (and one at step 0)


def batches(dm: WindowDataModule, n: int, size: int) -> list[torch.Tensor]:
    """``n`` full training batches, epoch after epoch (each a new seeded sample)."""
    out, epoch = [], 0
    while len(out) < n:
        dm.set_epoch(epoch)
        out += [b for b in dm.train_dataloader() if len(b) == size][: n - len(out)]
        epoch += 1
    return out


def validation_loss(model: torch.nn.Module, val: list[torch.Tensor]) -> float:
    model.eval()
    with torch.no_grad():
        total = sum(model.pretrain_loss(x).item() * len(x) for x in val)
    model.train()
    return total / sum(len(x) for x in val)


def run_width(settings, d_model: int, seconds: float, dm: WindowDataModule, val: list[torch.Tensor]) -> dict:
    cfg = settings.train
    gpt = dataclasses.replace(settings.model.gpt, d_model=d_model, d_ff=4 * d_model, dropout=0.0)
    model_cfg = dataclasses.replace(settings.model, gpt=gpt)
    torch.manual_seed(cfg.seeds[0])
    model = build_model(VARIANT, model_cfg)
    probe = batches(dm, 8, cfg.batch_size)
    flops = step_flops(model, probe[0])
    optimizer, _ = adamw_with_cosine(list(model.named_parameters()), cfg.lr, cfg.weight_decay, 1000)

    def step(x: torch.Tensor) -> None:
        loss = model.pretrain_loss(x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    step(probe[0])  # warm-up, then the step time (then the model starts again from the seed)
    t0 = time.perf_counter()
    for x in probe[1:6]:
        step(x)
    step_s = (time.perf_counter() - t0) / 5
    budget = max(EVALUATIONS, int(seconds / step_s))

    torch.manual_seed(cfg.seeds[0])
    model = build_model(VARIANT, model_cfg)
    optimizer, schedule = adamw_with_cosine(
        list(model.named_parameters()), cfg.lr, cfg.weight_decay, budget, warmup_steps(cfg, budget)
    )
    data = batches(dm, budget, cfg.batch_size)
    every = max(1, budget // EVALUATIONS)
    curve = [(0, validation_loss(model, val))]
    started, evaluating = time.perf_counter(), 0.0
    for i, x in enumerate(data, start=1):
        step(x)
        if i % every == 0 or i == budget:
            t = time.perf_counter()
            curve.append((i, validation_loss(model, val)))
            evaluating += time.perf_counter() - t
    train_s = time.perf_counter() - started - evaluating
    best_step, best = min(curve, key=lambda c: c[1])
    return {
        "d_model": d_model,
        "parameters": sum(p.numel() for p in model.parameters()),
        "step_gflop": flops / 1e9,
        "step_ms": 1e3 * train_s / budget,
        "steps": budget,
        "windows": budget * cfg.batch_size,
        "train_seconds": train_s,
        "initial_val_loss": curve[0][1],
        "best_val_loss": best,
        "best_step": best_step,
        "final_val_loss": curve[-1][1],
        "curve": curve,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source-path", type=Path, help="the real file (parquet); default: the demo's synthetic")
    parser.add_argument("--warehouse", type=Path, help="default: /tmp/kp_bench_model_size_<real|demo>")
    parser.add_argument("--start", type=dt.date.fromisoformat, default=dt.date(2014, 1, 2))
    parser.add_argument("--end", type=dt.date.fromisoformat, default=dt.date(2018, 12, 31))
    parser.add_argument("--seconds", type=float, default=90.0, help="training seconds per width")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args()
    configure_threads()
    warnings.filterwarnings("ignore")
    profile = "real" if args.source_path else "demo"
    warehouse = args.warehouse or Path(f"/tmp/kp_bench_model_size_{profile}")
    overrides = dict(warehouse=warehouse, env={})
    if args.source_path:
        overrides |= dict(source="parquet", source_path=str(args.source_path), start_date=args.start)
        overrides |= dict(end_date=args.end)
    settings = load_settings(profile, **overrides)
    ensure_warehouse(settings, args.end)
    fold = settings.folds[0]  # the first walk-forward fold (the real profile's 2019: training to 2018)
    dm = WindowDataModule(settings, Foundation(VARIANT, settings.train.seeds[0], fold))
    dm.setup()
    val = [b for b in dm.val_dataloader()]
    cfg = settings.train
    print(
        f"{profile} corpus {settings.data.start_date} .. {args.end}: {len(dm.train_days)} training days, "
        f"{sum(len(b) for b in val)} validation windows; batch {cfg.batch_size}, lr {cfg.lr}, "
        f"{args.seconds:.0f} s of training per width, torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    rows = [run_width(settings, d, args.seconds, dm, val) for d in args.sizes]
    print(
        f"\n{'d_model':>7} {'params':>9} {'GFLOP/step':>10} {'ms/step':>8} {'steps':>6} {'windows':>8} "
        f"{'val@0':>7} {'best val':>9} {'at step':>7} {'final':>7}"
    )
    for r in rows:
        print(
            f"{r['d_model']:>7} {r['parameters']:>9,} {r['step_gflop']:>10.2f} {r['step_ms']:>8.1f} {r['steps']:>6} "
            f"{r['windows']:>8,} {r['initial_val_loss']:>7.4f} {r['best_val_loss']:>9.4f} {r['best_step']:>7} "
            f"{r['final_val_loss']:>7.4f}"
        )
    best = min(rows, key=lambda r: r["best_val_loss"])
    print(f"\nlowest validation loss at equal wall time ({args.seconds:.0f} s): d_model {best['d_model']}")
    if args.json:
        args.json.write_text(json.dumps({"profile": profile, "seconds": args.seconds, "rows": rows}, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
