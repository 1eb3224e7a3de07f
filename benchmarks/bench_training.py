"""Training throughput on the demo profile: Lightning fit, the sampling DataModule alone, Lightning's overhead,
model FLOP utilization and what the hardware offers (bf16 autocast, larger batches, torch.compile).

    python benchmarks/bench_training.py [--warehouse DIR] [--end 2018-12-31] [--batches 40] [--repeats 2]
        [--steps 16] [--matmul 2048] [--no-compile] [--quick] [--json PATH]

Builds a demo warehouse (synthetic, 40 tickers) from 2017-01-03 through ``--end`` if it is missing
(not timed; a shorter history keeps that step short), then reports:
  * training windows/s: the real PretrainModule fit on SplineGPT for a fixed number of batches;
  * DataModule windows/s: one epoch of the train loader (uniform sample from the window store) without a
    model (target >= 10x training; benchmarks/bench_window_sampling.py measures it on real data);
  * Lightning's step overhead vs a plain PyTorch loop (same model init, batches, AdamW groups,
    clipping and cosine schedule): (lightning - plain) / plain (target <= 10%);
  * MFU: the FLOPs of one training step (forward + backward of the pretraining loss, counted with
    ``torch.utils.flop_counter.FlopCounterMode``) over the median step time, against the peak of a square float32
    matmul measured in the same run (and a bfloat16 one where bf16 is tried), for variants of the plain loop:
    float32 (the reference), batches x2 and x4, bf16 autocast (CPUs with avx512_bf16 or amx_bf16), torch.compile.
    Each has its speed-up in tokens/s over float32 in the same run and its result tolerance: the held-out loss after
    the same ``--steps`` batches of windows from the same initialization, dropout off (compiled dropout draws other
    masks), relative to float32's. A variant is kept when >= 5% faster and within its stated tolerance.
Timings take the best of ``--repeats`` runs (the 2-core machine is shared: the minimum is the signal); the MFU
variants take the median step over every repeat. ``--quick`` is a smoke run (< 1 min on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from kinematic_pipeline.calendar import trading_days  # noqa: E402
from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.models import build_model  # noqa: E402
from kinematic_pipeline.policy import Foundation  # noqa: E402
from kinematic_pipeline.stages.window_store import materialize_window_store  # noqa: E402
from kinematic_pipeline.tokenizations import SPLINE  # noqa: E402
from kinematic_pipeline.training.data import WindowDataModule  # noqa: E402
from kinematic_pipeline.training.modules import PretrainModule, adamw_with_cosine  # noqa: E402
from kinematic_pipeline.training.trainer import configure_threads, quiet_lightning  # noqa: E402

VARIANT = "splinegpt"
MIN_SPEEDUP = 1.05  # kept only when faster beyond the shared machine's noise


@dataclasses.dataclass(frozen=True)
class StepVariant:
    """One way to run the training step: ``scale`` batches joined per step, bf16 autocast, torch.compile."""

    name: str
    tolerance: float | None = None  # relative held-out loss difference to float32 allowed (None: the reference)
    scale: int = 1
    bf16: bool = False
    compiled: bool = False


FP32 = StepVariant("float32")


def ensure_warehouse(settings, end: dt.date) -> None:
    """The demo warehouse through ``end`` (not timed); the spline window store and statistics kept when current."""
    from kinematic_pipeline.stages.corpus import materialize_corpus_stats
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.tokenize import materialize_tokens

    t0 = time.perf_counter()
    if not settings.warehouse.shard_days("spline_tokens"):
        days = trading_days(settings.data.start_date, end)
        materialize_raw_ohlcv(settings, days, progress=False)
        materialize_tokens(settings, days, progress=False)
    materialize_window_store(settings, SPLINE, progress=False)
    materialize_corpus_stats(settings, (SPLINE,))
    print(f"the demo warehouse {settings.warehouse} through {end} (not timed): {time.perf_counter() - t0:.0f} s")


def time_loader(dm: WindowDataModule, repeats: int) -> tuple[float, int]:
    best, windows = float("inf"), 0
    for epoch in range(repeats):
        dm.set_epoch(epoch)
        t0 = time.perf_counter()
        windows = sum(len(batch) for batch in dm.train_dataloader())
        best = min(best, time.perf_counter() - t0)
    return best, windows


def fresh_module(settings, total_steps: int) -> PretrainModule:
    torch.manual_seed(settings.train.seeds[0])
    return PretrainModule(build_model(VARIANT, settings.model), settings.train, total_steps)


def lightning_fit(settings, train_data, steps: int, out: Path | None) -> float:
    """Trainer as in training/run.py (clipping, precision, deterministic); ``out`` adds its CSV logger and checkpoint."""
    module = fresh_module(settings, steps)
    cfg = settings.train
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=cfg.precision,
        max_steps=steps,
        max_epochs=-1,
        gradient_clip_val=cfg.grad_clip,
        deterministic=True,
        logger=L.pytorch.loggers.CSVLogger(out, name="logs") if out else False,
        enable_checkpointing=out is not None,
        default_root_dir=out,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        log_every_n_steps=10,
    )
    if isinstance(train_data, list):  # Lightning reads a bare list as several dataloaders
        train_data = DataLoader(train_data, batch_size=None)
    t0 = time.perf_counter()
    trainer.fit(module, train_dataloaders=train_data)
    return time.perf_counter() - t0


def plain_loop(
    settings, batches: list[torch.Tensor], variant: StepVariant = FP32
) -> tuple[list[float], torch.nn.Module]:
    """Seconds of each AdamW step over ``batches`` from the seeded initialization, and the trained model."""
    module = fresh_module(settings, len(batches))
    model, cfg = module.model, settings.train
    model.train()
    optimizer, schedule = adamw_with_cosine(list(model.named_parameters()), cfg.lr, cfg.weight_decay, len(batches))
    loss_of = torch.compile(model.pretrain_loss) if variant.compiled else model.pretrain_loss
    if variant.compiled:  # the first call compiles: outside the timed steps
        loss_of(batches[0]).backward()
        model.zero_grad(set_to_none=True)
    seconds = []
    for x in batches:
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant.bf16):
            loss = loss_of(x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()
        loss.item()  # Lightning reads the loss every step for logging: the same sync here
        seconds.append(time.perf_counter() - t0)
    return seconds, model


def cpu_has_bf16() -> bool:
    """Whether the CPU has bfloat16 matmul instructions (avx512_bf16 or AMX), from /proc/cpuinfo's flags."""
    try:
        flags = {f for line in open("/proc/cpuinfo") if line.startswith("flags") for f in line.split(":")[1].split()}
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def matmul_peak(dtype: torch.dtype, n: int, tries: int = 5) -> float:
    """FLOP/s of an n x n matmul in ``dtype`` (2 n^3 per product), best of ``tries`` after a warm-up."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        for _ in range(3):
            a @ b
        best = min(best, (time.perf_counter() - t0) / 3)
    return 2 * n**3 / best


def step_flops(model: torch.nn.Module, x: torch.Tensor) -> int:
    """FLOPs of one training step's forward and backward (the optimizer's elementwise work is not counted)."""
    counter = FlopCounterMode(display=False)
    with counter:
        model.pretrain_loss(x).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def held_out_loss(model: torch.nn.Module, x: torch.Tensor) -> float:
    """The pretraining loss on ``x`` in eval mode (no dropout, no gradient)."""
    model.eval()
    with torch.no_grad():
        return model.pretrain_loss(x).item()


def joined(batches: list[torch.Tensor], k: int) -> list[torch.Tensor]:
    """Consecutive groups of ``k`` batches as one batch each (a trailing partial group dropped)."""
    return [torch.cat(batches[i : i + k]) for i in range(0, len(batches) - k + 1, k)]


def measure_variants(
    settings,
    pool: list[torch.Tensor],
    held_out: torch.Tensor,
    variants: list[StepVariant],
    steps: int,
    repeats: int,
    peaks: dict[str, float],
) -> list[dict]:
    """One row per variant: median step, tokens/s, FLOP/s, MFU against ``peaks`` ("float32", "bfloat16" when
    bf16 is tried), speed-up and held-out loss difference to float32 (``variants[0]``), verdict.
    ``pool`` holds at least ``steps`` x the largest scale batches of the profile's size."""
    no_dropout = dataclasses.replace(settings.model.gpt, dropout=0.0)
    exact = dataclasses.replace(settings, model=dataclasses.replace(settings.model, gpt=no_dropout))
    data = {v.name: joined(pool, v.scale)[:steps] for v in variants}
    flops = {v.scale: step_flops(fresh_module(settings, 1).model, data[v.name][0]) for v in variants}
    seconds: dict[str, list[float]] = {v.name: [] for v in variants}
    failures: dict[str, str] = {}
    plain_loop(settings, pool[:2])  # warm-up: first-call allocations, thread pools
    for _ in range(repeats):  # interleaved, so drifting load hits all alike
        for v in variants:
            if v.name in failures:
                continue
            try:
                seconds[v.name] += plain_loop(settings, data[v.name], v)[0]
            except Exception as exc:  # noqa: BLE001 - what the platform cannot run is reported, not fatal
                failures[v.name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"
    losses = {}
    for v in variants:  # the same windows (steps batches) in steps / scale steps, dropout off
        if v.name not in failures:
            losses[v.name] = held_out_loss(plain_loop(exact, joined(pool[:steps], v.scale), v)[1], held_out)
    reference = variants[0].name
    rate = {n: data[n][0].shape[:2].numel() / statistics.median(t) for n, t in seconds.items() if n not in failures}
    rows = []
    for v in variants:
        row: dict = {"variant": v.name, "batch": len(data[v.name][0]), "tolerance": v.tolerance}
        if v.name in failures:
            rows.append(row | {"failed": failures[v.name], "verdict": "drop (failed)"})
            continue
        step_s = statistics.median(seconds[v.name])
        achieved = flops[v.scale] / step_s
        diff = abs(losses[v.name] - losses[reference]) / abs(losses[reference])
        speedup = rate[v.name] / rate[reference]
        if v.tolerance is None:
            verdict = "reference"
        elif diff > v.tolerance:
            verdict = "drop (beyond tolerance)"
        else:
            verdict = "keep" if speedup >= MIN_SPEEDUP else "drop (no speed-up)"
        rows.append(
            row
            | {
                "step_s": step_s,
                "tokens_per_s": rate[v.name],
                "step_flops": flops[v.scale],
                "flop_per_s": achieved,
                "mfu_float32": achieved / peaks["float32"],
                "mfu_bfloat16": achieved / peaks["bfloat16"] if v.bf16 else None,
                "speedup": speedup,
                "held_out_loss": losses[v.name],
                "rel_diff": diff,
                "verdict": verdict,
            }
        )
    return rows


def print_mfu(rows: list[dict]) -> None:
    print(
        f"\n{'variant':<14} {'batch':>5} {'ms/step':>8} {'tokens/s':>9} {'GFLOP/s':>8} {'MFU f32':>8} "
        f"{'MFU bf16':>8} {'speed-up':>8} {'rel diff':>8} {'tol':>6}  verdict"
    )
    for r in rows:
        if "failed" in r:
            print(f"{r['variant']:<14} {r['batch']:>5} failed: {r['failed']}  {r['verdict']}")
            continue
        bf16 = f"{r['mfu_bfloat16']:>8.1%}" if r["mfu_bfloat16"] is not None else f"{'-':>8}"
        tol = f"{r['tolerance']:>6.0e}" if r["tolerance"] is not None else f"{'-':>6}"
        print(
            f"{r['variant']:<14} {r['batch']:>5} {1e3 * r['step_s']:>8.1f} {r['tokens_per_s']:>9.0f} "
            f"{r['flop_per_s'] / 1e9:>8.2f} {r['mfu_float32']:>8.1%} {bf16} {r['speedup']:>7.2f}x "
            f"{r['rel_diff']:>8.1e} {tol}  {r['verdict']}"
        )


def lightning_section(settings, dm: WindowDataModule, n_batches: int, repeats: int) -> dict:
    """The DataModule alone, Lightning fit (streaming, bare, logged) and the plain loop: windows and best seconds."""
    cfg = settings.train
    data_s, data_windows = time_loader(dm, repeats)
    batches = []
    for batch in dm.train_dataloader():
        if len(batch) == cfg.batch_size:
            batches.append(batch)
        if len(batches) == n_batches:
            break
    n = len(batches) * cfg.batch_size

    with quiet_lightning(progress=False), tempfile.TemporaryDirectory() as tmp:
        lightning_fit(settings, batches[:3], 3, None)  # warm-up: first-call allocations, thread pools
        plain_loop(settings, batches[:3])
        stream, bare, logged, plain = [], [], [], []
        for _ in range(repeats):  # interleaved, so drifting load hits all alike
            stream.append(lightning_fit(settings, dm.train_dataloader(), len(batches), Path(tmp) / "stream"))
            bare.append(lightning_fit(settings, batches, len(batches), None))
            logged.append(lightning_fit(settings, batches, len(batches), Path(tmp) / "logged"))
            plain.append(sum(plain_loop(settings, batches)[0]))
    stream_s, bare_s, logged_s, plain_s = min(stream), min(bare), min(logged), min(plain)

    rows = [
        ("DataModule alone (1 epoch, no model)", data_windows, data_s),
        ("Lightning fit, sampling loader + CSV log + ckpt", n, stream_s),
        ("Lightning fit, pre-materialized batches, bare", n, bare_s),
        ("Lightning fit, pre-materialized batches, CSV + ckpt", n, logged_s),
        ("plain PyTorch loop, same batches", n, plain_s),
    ]
    print(f"\n{'measurement':<52} {'windows':>8} {'seconds':>8} {'windows/s':>10}")
    for name, windows, seconds in rows:
        print(f"{name:<52} {windows:>8} {seconds:>8.2f} {windows / seconds:>10.0f}")
    train_rate = n / stream_s
    data_rate = data_windows / data_s
    print(f"\ndata / training rate: {data_rate / train_rate:.1f}x (target >= 10x)")
    print(f"Lightning overhead, bare: {100 * (bare_s - plain_s) / plain_s:+.1f}% (target <= 10%)")
    print(f"Lightning overhead, with CSV logger + checkpoint: {100 * (logged_s - plain_s) / plain_s:+.1f}%")
    return {
        "rows": [{"measurement": name, "windows": w, "seconds": sec} for name, w, sec in rows],
        "data_over_training": data_rate / train_rate,
        "lightning_overhead_bare": (bare_s - plain_s) / plain_s,
        "lightning_overhead_logged": (logged_s - plain_s) / plain_s,
    }


def mfu_section(settings, dm: WindowDataModule, steps: int, repeats: int, matmul: int, compile_: bool) -> dict:
    """Peaks, the step's FLOPs and the variants' table (``measure_variants``) on the profile's real windows."""
    size = settings.train.batch_size
    bf16 = cpu_has_bf16()
    variants = [FP32, StepVariant("batch x2", 2e-2, scale=2), StepVariant("batch x4", 2e-2, scale=4)]
    if bf16:
        variants.append(StepVariant("bf16 autocast", 2e-2, bf16=True))
    if compile_:
        variants.append(StepVariant("torch.compile", 1e-4, compiled=True))
    need = steps * max(v.scale for v in variants)
    pool = [b for b in dm.train_dataloader() if len(b) == size]
    pool = (pool * -(-need // len(pool)))[:need]  # the epoch again where it is short
    held_out = next(iter(dm.val_dataloader()))
    peaks = {"float32": matmul_peak(torch.float32, matmul)}
    if bf16:
        peaks["bfloat16"] = matmul_peak(torch.bfloat16, matmul)
    print(
        f"\nMFU: {steps} steps x {repeats} repeats, bf16 {'tried' if bf16 else 'not tried (no avx512_bf16/amx_bf16)'}"
        f"; peak of a {matmul}^2 matmul: "
        + ", ".join(f"{dtype} {peak / 1e9:.1f} GFLOP/s" for dtype, peak in peaks.items())
    )
    rows = measure_variants(settings, pool, held_out, variants, steps, repeats, peaks)
    print(f"one step (forward + backward) at batch {size}: {rows[0]['step_flops'] / 1e9:.3f} GFLOP")
    print_mfu(rows)
    print(
        f"speed-up: tokens/s over float32's; rel diff: held-out loss after the same {steps} batches of windows, "
        f"dropout off, against float32's; keep: >= {MIN_SPEEDUP:.2f}x and within tol"
    )
    return {"peaks": peaks, "steps": steps, "repeats": repeats, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", default="/tmp/kp_bench_training_warehouse")
    parser.add_argument("--end", type=dt.date.fromisoformat, default=dt.date(2018, 12, 31))
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16, help="training steps per MFU variant and repeat")
    parser.add_argument("--matmul", type=int, default=2048, help="side of the square matmul giving the peak")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (its first call compiles)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 6 batches, 4 steps, 1 repeat")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.steps, args.repeats, args.matmul = 6, 4, 1, 1024

    configure_threads()
    warnings.filterwarnings("ignore")
    settings = load_settings("demo", warehouse=args.warehouse, env={})
    ensure_warehouse(settings, args.end)
    cfg = settings.train
    dm = WindowDataModule(settings, Foundation(VARIANT, settings.train.seeds[0], settings.folds[0]))
    dm.setup()
    print(
        f"demo profile: {VARIANT} d_model={settings.model.gpt.d_model} layers={settings.model.gpt.n_layers}, batch "
        f"{cfg.batch_size}, {len(dm.train_days)} training days, epoch cap {cfg.max_windows_per_epoch}, "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    report = {
        "profile": "demo",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "lightning": lightning_section(settings, dm, args.batches, args.repeats),
        "mfu": mfu_section(settings, dm, args.steps, args.repeats, args.matmul, not args.no_compile),
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
