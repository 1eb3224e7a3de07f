"""How to spend two cores on training steps: a profile's pretraining step (``--profile``, default ``real``: its model
sizes, batch, AdamW with clipping and the cosine schedule) measured in the same run as

  * one process at two threads (what ``python -m kinematic_pipeline materialize`` does today: one step at a time);
  * two processes at once, one thread each (two training steps side by side: a Dagster executor of two slots);
  * two processes at once, two threads each (two steps side by side at the default threads: oversubscribed);
  * one process at two threads with ``torch.compile`` (its compile time counted, and the steps it needs to pay);
  * one process at two threads with bf16 autocast (CPUs with avx512_bf16 or AMX);
  * regional compilation (each repeated transformer block compiled on its own, ``nn.Module.compile``) with an
    Inductor cache (``TORCHINDUCTOR_CACHE_DIR``) cold, then warm (a new process reading what the cold one wrote, as
    every training process of a run would share one), at two threads x 1 and one thread x 2 processes;
  * one process at two threads with batches of 2x and 4x the profile's (windows per second only: whether a larger
    batch with a scaled learning rate reaches the same validation loss is ``bench_training.py``'s MFU section).

Windows are drawn N(0, 1) in the model's input shape (the step's cost does not depend on the values). Every mode
starts its processes together (a barrier) and counts windows over the slowest process's timed steps; the first
``--warmup`` steps are not timed. Ratios are against one process at two threads in the same run.

    python benchmarks/bench_step_parallelism.py [--profile real] [--variants splinegpt patchtst] [--steps 40] [--warmup 5]
        [--no-compile] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _settings(profile: str):
    """The profile's backbones, batch and optimizer, as the profile declares them (no source file needed)."""
    from kinematic_pipeline.config.profiles import profile_settings

    return profile_settings(profile)


def _step_seconds(
    profile: str, variant: str, threads: int, batch: int, steps: int, warmup: int, how: str, barrier
) -> dict:
    """Seconds of ``steps`` timed training steps after ``warmup`` (compile, if any, inside the first warm-up step);
    ``how``: "" (eager float32), "compile" (the whole loss), "regional" (each repeated block), "bf16" (autocast)."""
    import torch

    from kinematic_pipeline.models import build_model
    from kinematic_pipeline.training.modules import adamw_with_cosine

    torch.set_num_threads(threads)
    settings = _settings(profile)
    train = settings.train
    torch.manual_seed(0)
    model = build_model(variant, settings.model)
    cfg = model.cfg  # the variant's backbone's own config
    model.train()
    channels = 2 if variant == "patchtst" else cfg.n_channels
    x = torch.randn(batch, cfg.context, channels)
    lr = train.lr * batch / train.batch_size  # the linear scaling rule for larger batches
    optimizer, schedule = adamw_with_cosine(list(model.named_parameters()), lr, train.weight_decay, warmup + steps + 1)
    loss_of = torch.compile(model.pretrain_loss) if how == "compile" else model.pretrain_loss
    if how == "regional":
        for name in ("blocks", "layers"):  # the GPT's blocks, PatchTST's encoder layers
            for block in getattr(model, name, ()):
                block.compile()

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=how == "bf16"):
            loss = loss_of(x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()
        schedule.step()
        loss.item()

    barrier.wait()
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    for _ in range(warmup - 1):
        step()
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return {"first_step_s": first, "timed_s": time.perf_counter() - t0, "windows": steps * batch}


def _worker(args, barrier, queue) -> None:
    try:
        queue.put(_step_seconds(*args, barrier))
    except Exception as exc:  # reported as the mode's row, never a hang of the other process
        barrier.abort()
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def measure(
    profile: str, variant: str, processes: int, threads: int, batch: int, steps: int, warmup: int, how: str
) -> dict:
    """One mode: ``processes`` spawned at once, each ``threads`` threads; total windows/s over the slowest."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(processes), ctx.Queue()
    args = (profile, variant, threads, batch, steps, warmup, how)
    procs = [ctx.Process(target=_worker, args=(args, barrier, queue)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        return {"error": errors[0]}
    slowest = max(r["timed_s"] for r in results)
    return {
        "windows_per_s": sum(r["windows"] for r in results) / slowest,
        "step_ms": 1000 * slowest / steps,
        "first_step_s": max(r["first_step_s"] for r in results),
    }


MODES = [  # (name, processes, threads, batch scale, how, Inductor cache: "" none, "cold" a fresh one, "warm" the last)
    ("1 process x 2 threads (today)", 1, 2, 1, "", ""),
    ("2 processes x 1 thread, side by side", 2, 1, 1, "", ""),
    ("2 processes x 2 threads (oversubscribed)", 2, 2, 1, "", ""),
    ("1 process x 2 threads, bf16 autocast", 1, 2, 1, "bf16", ""),
    ("1 process x 2 threads, torch.compile", 1, 2, 1, "compile", "cold"),
    ("1 process x 2 threads, regional compile, cold cache", 1, 2, 1, "regional", "cold"),
    ("1 process x 2 threads, regional compile, warm cache", 1, 2, 1, "regional", "warm"),
    ("2 processes x 1 thread, regional compile, warm cache", 2, 1, 1, "regional", "warm"),
    ("1 process x 2 threads, batch x2, lr x2", 1, 2, 2, "", ""),
    ("1 process x 2 threads, batch x4, lr x4", 1, 2, 4, "", ""),
]
COMPILED = ("compile", "regional")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="real", help="whose backbones and batch (real; demo: half as wide)")
    parser.add_argument("--variants", nargs="+", default=["splinegpt", "patchtst"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = _settings(args.profile)
    batch, gpt = settings.train.batch_size, settings.model.gpt
    print(f"profile {args.profile}: batch {batch}, GPT d_model {gpt.d_model}, {gpt.n_layers} layers, d_ff {gpt.d_ff}")
    rows = []
    print("| variant | mode | windows/s | x today | step ms | first step s | compile pays after |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    caches = tempfile.TemporaryDirectory(prefix="inductor_")
    cache = None
    for variant in args.variants:
        reference = None
        for name, processes, threads, scale, how, state in MODES:
            if how in COMPILED and args.no_compile:
                continue
            if state == "cold" or (state == "warm" and cache is None):
                cache = tempfile.mkdtemp(dir=caches.name)  # spawned workers read the variable at start
            if state:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
            r = measure(args.profile, variant, processes, threads, batch * scale, args.steps, args.warmup, how)
            row = {"variant": variant, "mode": name, **r}
            rows.append(row)
            if "error" in r:
                print(f"| {variant} | {name} | unavailable: {r['error'][:80]} | | | | |")
                continue
            reference = reference or r
            ratio = r["windows_per_s"] / reference["windows_per_s"]
            pays = ""
            if how in COMPILED:  # steps until the compile time is won back by the faster steps (same threads)
                eager = MODES[0 if processes == 1 else 1][0]
                same = next(x for x in rows if (x["variant"], x["mode"]) == (variant, eager) and "error" not in x)
                saved = (same["step_ms"] - r["step_ms"]) / 1000
                extra = r["first_step_s"] - same["first_step_s"]
                pays = f"{extra / saved:.0f} steps" if saved > 0 else "never (no faster step)"
                row["compile_pays_after_steps"] = extra / saved if saved > 0 else None
            print(
                f"| {variant} | {name} | {r['windows_per_s']:.0f} | {ratio:.2f} | {r['step_ms']:.0f} | "
                f"{r['first_step_s']:.1f} | {pays} |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
