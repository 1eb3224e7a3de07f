"""Training throughput on the demo profile: Lightning fit, the sampling DataModule alone, Lightning's overhead.

    python benchmarks/bench_training.py [--warehouse DIR] [--end 2018-12-31] [--batches 40] [--repeats 2]

Builds a demo warehouse (synthetic, 40 tickers) from 2017-01-03 through ``--end`` if it is missing
(not timed; a shorter history keeps that step short), then reports:
  * training windows/s: the real PretrainModule fit on SplineGPT for a fixed number of batches;
  * DataModule windows/s: one epoch of the train loader (uniform sample from the window store) without a
    model (target >= 10x training; benchmarks/bench_window_sampling.py measures it on real data);
  * Lightning's step overhead vs a plain PyTorch loop (same model init, batches, AdamW groups,
    clipping and cosine schedule): (lightning - plain) / plain (target <= 10%).
Timings take the best of ``--repeats`` runs (the 2-core machine is shared: the minimum is the signal).
"""

from __future__ import annotations

import argparse
import datetime as dt
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

from kinematic_pipeline.calendar import trading_days  # noqa: E402
from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.models import build_model  # noqa: E402
from kinematic_pipeline.policy import Policy  # noqa: E402
from kinematic_pipeline.training.data import WindowDataModule  # noqa: E402
from kinematic_pipeline.training.modules import PretrainModule, adamw_with_cosine  # noqa: E402
from kinematic_pipeline.training.trainer import configure_threads, quiet_lightning  # noqa: E402
from kinematic_pipeline.window_store import build_window_store  # noqa: E402

VARIANT = "splinegpt"


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
    build_window_store(settings, "spline_tokens", progress=False)
    materialize_corpus_stats(settings, ("spline_tokens",))
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


def plain_loop(settings, batches: list[torch.Tensor]) -> float:
    module = fresh_module(settings, len(batches))
    model, cfg = module.model, settings.train
    model.train()
    optimizer, schedule = adamw_with_cosine(list(model.named_parameters()), cfg.lr, cfg.weight_decay, len(batches))
    t0 = time.perf_counter()
    for x in batches:
        loss = model.pretrain_loss(x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()
        loss.item()  # Lightning reads the loss every step for logging: the same sync here
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", default="/tmp/kp_bench_training_warehouse")
    parser.add_argument("--end", type=dt.date.fromisoformat, default=dt.date(2018, 12, 31))
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    configure_threads()
    warnings.filterwarnings("ignore")
    settings = load_settings("demo", warehouse=args.warehouse, env={})
    ensure_warehouse(settings, args.end)
    cfg = settings.train
    dm = WindowDataModule(settings, Policy(VARIANT, settings.train.seeds[0]))
    dm.setup()
    print(
        f"demo profile: {VARIANT} d_model={settings.model.d_model} layers={settings.model.n_layers}, batch "
        f"{cfg.batch_size}, {len(dm.train_days)} training days, epoch cap {cfg.max_windows_per_epoch}, "
        f"torch threads {torch.get_num_threads()}"
    )

    data_s, data_windows = time_loader(dm, args.repeats)
    batches = []
    for batch in dm.train_dataloader():
        if len(batch) == cfg.batch_size:
            batches.append(batch)
        if len(batches) == args.batches:
            break
    n = len(batches) * cfg.batch_size

    with quiet_lightning(progress=False), tempfile.TemporaryDirectory() as tmp:
        lightning_fit(settings, batches[:3], 3, None)  # warm-up: first-call allocations, thread pools
        plain_loop(settings, batches[:3])
        stream, bare, logged, plain = [], [], [], []
        for _ in range(args.repeats):  # interleaved, so drifting load hits all alike
            stream.append(lightning_fit(settings, dm.train_dataloader(), len(batches), Path(tmp) / "stream"))
            bare.append(lightning_fit(settings, batches, len(batches), None))
            logged.append(lightning_fit(settings, batches, len(batches), Path(tmp) / "logged"))
            plain.append(plain_loop(settings, batches))
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


if __name__ == "__main__":
    main()
