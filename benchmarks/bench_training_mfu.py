"""Model FLOP utilization of the training step, and what the hardware offers (bf16, larger batches, compile).

    python benchmarks/bench_training_mfu.py [--warehouse DIR] [--steps 12] [--repeats 3] [--quick]

On the demo profile's real windows (the warehouse of ``bench_training.py``, built if missing, not timed):
  * the FLOPs of one training step of SplineGPT (forward + backward of the pretraining loss, counted with
    ``torch.utils.flop_counter.FlopCounterMode``), per second, against the peak of a square float32 matmul
    measured in the same run (and a bfloat16 one where bf16 is tried): MFU = achieved / peak;
  * variants: float32 (the reference), bf16 autocast (on CPUs with avx512_bf16 or amx_bf16, or a GPU),
    batches x2 and x4, ``torch.compile``; each with its speed-up over float32 measured in the same run and,
    where the trajectory is comparable (same batches), the relative difference of the loss after ``--steps``
    AdamW steps from the same initialization against a stated tolerance: "keep" only when faster beyond
    noise (>= 5%) and within tolerance.
Timings take the best of ``--repeats`` (the 2-core machine is shared: the minimum is the signal).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from bench_training import VARIANT, ensure_warehouse, fresh_module  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.policy import Policy  # noqa: E402
from kinematic_pipeline.training.data import WindowDataModule  # noqa: E402
from kinematic_pipeline.training.modules import adamw_with_cosine  # noqa: E402
from kinematic_pipeline.training.trainer import configure_threads  # noqa: E402

TOLERANCE = {"bf16 autocast": 2e-2, "torch.compile": 1e-4}  # relative loss difference after --steps steps


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def matmul_peak(dtype: torch.dtype, n: int, repeats: int) -> float:
    """FLOP/s of an n x n matmul in ``dtype`` (2 n^3 per product), best of ``repeats`` after a warm-up."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(3):
            a @ b
        best = min(best, (time.perf_counter() - t0) / 3)
    return 2 * n**3 / best


def step_flops(model, x: torch.Tensor) -> int:
    """FLOPs of one training step's forward and backward (the optimizer's elementwise work is not counted)."""
    counter = FlopCounterMode(display=False)
    with counter:
        model.pretrain_loss(x).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def train(settings, batches: list[torch.Tensor], *, bf16: bool = False, compiled: bool = False) -> tuple[float, float]:
    """(seconds, final loss) of AdamW steps over ``batches`` from the seeded initialization (the real module)."""
    module = fresh_module(settings, len(batches))
    model, cfg = module.model, settings.train
    model.train()
    optimizer, schedule = adamw_with_cosine(list(model.named_parameters()), cfg.lr, cfg.weight_decay, len(batches))
    loss_of = torch.compile(model.pretrain_loss) if compiled else model.pretrain_loss
    if compiled:  # compile outside the timed loop (its first call builds the graph)
        loss_of(batches[0]).backward()
        model.zero_grad(set_to_none=True)
    t0, loss = time.perf_counter(), None
    for x in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()
        loss = loss.item()
    return time.perf_counter() - t0, float(loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", default="/tmp/kp_bench_training_warehouse")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--matmul", type=int, default=2048)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (its first call takes a while)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 steps, 1 repeat, 1024 matmul")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.matmul = 4, 1, 1024

    configure_threads()
    warnings.filterwarnings("ignore")
    settings = load_settings("demo", warehouse=args.warehouse, env={})
    ensure_warehouse(settings, __import__("datetime").date(2018, 12, 31))
    dm = WindowDataModule(settings, Policy(VARIANT, settings.train.seeds[0]))
    dm.setup()
    size = settings.train.batch_size
    pool = [b for b in dm.train_dataloader() if len(b) == size]
    pool = (pool * (1 + 4 * args.steps // max(1, len(pool))))[: 4 * args.steps]
    base = pool[: args.steps]
    bf16 = cpu_has_bf16() or torch.cuda.is_available()

    peak32 = matmul_peak(torch.float32, args.matmul, args.repeats)
    peak16 = matmul_peak(torch.bfloat16, args.matmul, args.repeats) if bf16 else float("nan")
    flops = step_flops(fresh_module(settings, 1).model, base[0])
    print(
        f"demo profile: {VARIANT} d_model={settings.model.d_model} layers={settings.model.n_layers}, batch {size}, "
        f"{args.steps} steps, torch {torch.__version__}, threads {torch.get_num_threads()}, bf16 "
        f"{'available' if bf16 else 'not available'}\n"
        f"peak: float32 matmul {args.matmul}^2 {peak32 / 1e9:.1f} GFLOP/s"
        + (f", bfloat16 {peak16 / 1e9:.1f} GFLOP/s" if bf16 else "")
        + f"; one step (forward + backward) at batch {size}: {flops / 1e9:.3f} GFLOP"
    )

    def joined(k: int) -> list[torch.Tensor]:
        return [torch.cat(pool[i * k : (i + 1) * k]) for i in range(args.steps)]

    variants = [("float32", base, {}, 1), ("batch x2", joined(2), {}, 2), ("batch x4", joined(4), {}, 4)]
    if bf16:
        variants.append(("bf16 autocast", base, {"bf16": True}, 1))
    if not args.no_compile:
        variants.append(("torch.compile", base, {"compiled": True}, 1))
    train(settings, base[:2])  # warm-up: first-call allocations, thread pools
    results = {}
    for _ in range(args.repeats):  # interleaved, so drifting load hits all alike
        for name, batches, kw, _scale in variants:
            try:
                seconds, loss = train(settings, batches, **kw)
            except Exception as exc:  # noqa: BLE001 - a variant the platform cannot run is reported, not fatal
                results[name] = (float("nan"), float("nan"), f"failed: {type(exc).__name__}: {str(exc)[:80]}")
                continue
            best = results.get(name, (float("inf"),))[0]
            results[name] = (min(best, seconds), loss, "")
    ref_s, ref_loss, _ = results["float32"]
    print(
        f"\n{'variant':<15} {'s/step':>8} {'windows/s':>10} {'GFLOP/s':>8} {'MFU':>6} {'speed-up':>9} "
        f"{'loss':>8} {'rel diff':>9} {'tolerance':>9}  verdict"
    )
    for name, _batches, kw, scale in variants:
        seconds, loss, failure = results[name]
        if failure:
            print(f"{name:<15} {failure}")
            continue
        per_step = seconds / args.steps
        achieved = flops * scale / per_step
        peak = peak16 if kw.get("bf16") else peak32
        speedup = (ref_s / args.steps) / (per_step / scale)  # windows per second against float32's
        tol = TOLERANCE.get(name)
        diff = abs(loss - ref_loss) / abs(ref_loss) if tol is not None else float("nan")
        if name == "float32":
            verdict = "reference"
        elif tol is None:
            verdict = ("keep" if speedup >= 1.05 else "drop") + " (another batch: another trajectory, throughput only)"
        else:
            verdict = "keep" if speedup >= 1.05 and diff <= tol else "drop"
        print(
            f"{name:<15} {per_step:>8.3f} {size * scale / per_step:>10.0f} {achieved / 1e9:>8.2f} "
            f"{achieved / peak:>6.1%} {speedup:>8.2f}x {loss:>8.4f} "
            + (f"{diff:>9.1e} {tol:>9.0e}" if tol is not None else f"{'-':>9} {'-':>9}")
            + f"  {verdict}"
        )


if __name__ == "__main__":
    main()
