"""Uniform epoch samples from the window store: serving speed against the training step, and day coverage.

    python benchmarks/bench_window_sampling.py [--profile real] [--warehouse DIR] [--variant splinegpt]
                                               [--epochs 5] [--train-batches 30]

Needs a warehouse with the variant's token shards and corpus_stats for the profile's cut (e.g. the `real`
profile's: KP_PROFILE=real ... python -m kinematic_pipeline materialize); builds the window store when it is
missing or stale (timed and reported apart). Then, in one run:
  * sampled windows/s: ``--epochs`` epochs of the real train DataLoader (WindowDataModule: a uniform sample of
    the profile's cap, read from the store with positional reads, anchored and z-scored), the first epoch
    reported apart (its pages may come from disk; ``--cold`` drops the page cache before it, as root), the
    others at their median;
  * training windows/s: the profile's backbone, next-token MSE, backward, clipping, AdamW step, on batches of
    the profile's size (a plain PyTorch loop: the training step without Lightning's bookkeeping);
  * the ratio of the two (target >= 10x);
  * distinct training days each epoch's sample covers against the number expected of a uniform sample
    (``window_store.expected_distinct_days``; target: within 5%).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kinematic_pipeline.config import load_settings  # noqa: E402
from kinematic_pipeline.models import build_model  # noqa: E402
from kinematic_pipeline.policy import Foundation  # noqa: E402
from kinematic_pipeline.sampling import expected_distinct_days  # noqa: E402
from kinematic_pipeline.stages.window_store import materialize_window_store  # noqa: E402
from kinematic_pipeline.training.data import WindowDataModule  # noqa: E402
from kinematic_pipeline.training.modules import adamw_with_cosine  # noqa: E402
from kinematic_pipeline.training.trainer import configure_threads  # noqa: E402
from kinematic_pipeline.variants import variant as lookup_variant  # noqa: E402
from kinematic_pipeline.window_store import StaleStoreError, open_store  # noqa: E402


def ensure_store(settings, tok) -> None:
    try:
        open_store(settings, tok)
        print(f"window store of {tok.tokens_asset}: present and current")
    except StaleStoreError as why:
        print(f"building the window store ({why})")
        summary = materialize_window_store(settings, tok)
        gb = summary.manifest["windows"] * 64 * 9 * 4 / 1e9
        print(f"built in {summary.seconds:.1f} s: {summary.manifest['windows']:,} windows, {gb:.2f} GB")


def time_epochs(dm: WindowDataModule, epochs: int) -> list[tuple[float, int]]:
    out = []
    for epoch in range(epochs):
        dm.set_epoch(epoch)
        t0 = time.perf_counter()
        windows = sum(len(batch) for batch in dm.train_dataloader())
        out.append((time.perf_counter() - t0, windows))
    return out


def time_training(settings, variant: str, batches: list[torch.Tensor]) -> float:
    torch.manual_seed(settings.train.seeds[0])
    model = build_model(variant, settings.model)
    model.train()
    cfg = settings.train
    optimizer, schedule = adamw_with_cosine(list(model.named_parameters()), cfg.lr, cfg.weight_decay, len(batches))

    def step(x: torch.Tensor) -> None:
        loss = model.pretrain_loss(x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()
        loss.item()

    for x in batches[:3]:  # warm-up: first-call allocations, thread pools
        step(x)
    t0 = time.perf_counter()
    for x in batches:
        step(x)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="real")
    parser.add_argument("--warehouse", default=None, help="default: KP_WAREHOUSE or ./warehouse")
    parser.add_argument("--variant", default="splinegpt")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--train-batches", type=int, default=30)
    parser.add_argument("--cold", action="store_true", help="drop the page cache before the first epoch (root)")
    args = parser.parse_args()

    warnings.filterwarnings("ignore")
    configure_threads()
    settings = load_settings(args.profile, warehouse=args.warehouse)
    asset = lookup_variant(args.variant).token_asset
    ensure_store(settings, lookup_variant(args.variant).tokenization)
    dm = WindowDataModule(settings, Foundation(args.variant, settings.train.seeds[0], settings.folds[0]))
    dm.setup()
    cfg = settings.train
    store = dm.store
    print(
        f"{args.profile} profile, {args.variant} ({asset}): store of {store.manifest['windows']:,} windows over "
        f"{store.manifest['days']:,} days (to {store.manifest['train_end']}); {len(dm.train_days):,} training days, "
        f"{len(dm._train.rows):,} training windows; epoch cap {cfg.max_windows_per_epoch}, batch {cfg.batch_size}, "
        f"torch threads {torch.get_num_threads()}"
    )

    first = "first epoch (pages may come from disk)"
    if args.cold:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")  # PermissionError unless root: say so, do not guess
        first = "first epoch, page cache dropped before it"
    timings = time_epochs(dm, args.epochs)
    first_rate = timings[0][1] / timings[0][0]
    rest = [w / s for s, w in timings[1:]] or [first_rate]
    data_rate = statistics.median(rest)

    batches = []
    for batch in dm.train_dataloader():
        if len(batch) == cfg.batch_size:
            batches.append(batch)
        if len(batches) == args.train_batches:
            break
    train_s = time_training(settings, args.variant, batches)
    train_rate = len(batches) * cfg.batch_size / train_s

    print(f"\n{'measurement':<58} {'windows/s':>12}")
    print(f"{'sampled windows, ' + first:<58} {first_rate:>12,.0f}")
    print(f"{'sampled windows, median of the next epochs':<58} {data_rate:>12,.0f}")
    print(f"{'training step (forward, backward, clip, AdamW)':<58} {train_rate:>12,.0f}")
    print(
        f"\nsampled / training: {data_rate / train_rate:.1f}x (first epoch {first_rate / train_rate:.1f}x; target >= 10x)"
    )

    day_of_row = store.day_of_row
    per_day = np.bincount(day_of_row[dm._train.rows], minlength=store.days.height)
    k = dm.train_windows()
    expected = expected_distinct_days(per_day[per_day > 0], k)
    distinct = [len(np.unique(day_of_row[dm._train.served_rows(e)])) for e in range(args.epochs)]
    print(
        f"distinct training days per epoch of {k:,} windows: {', '.join(map(str, distinct))} (mean "
        f"{np.mean(distinct):,.1f}); expected under uniform sampling {expected:,.1f} of {int((per_day > 0).sum()):,}: "
        f"{100 * (np.mean(distinct) / expected - 1):+.2f}% (target within 5%)"
    )


if __name__ == "__main__":
    main()
