"""Uniform epoch samples of the training windows, their split among ranks, and the day coverage to expect.

Pure numpy: ``training/data.py`` draws every epoch with ``epoch_sample`` and deals it with ``part_of``; the
benchmark and the tests compare what a sample covers with ``expected_distinct_days``. No dagster, no torch.
"""

from __future__ import annotations

import math

import numpy as np

STREAM_SALT = {"train": 0, "val": 1}  # independent draws for the two splits of one seed
# The capped validation sample's draw: the fold's, one for every seed, so that the seeds' best validation losses
# differ by their training alone (the budget test's seed spread; science: a per-seed sample made it the sample's)
VAL_SAMPLE_SEED = 0


def epoch_sample(n: int, cap: int | None, seed: int, epoch: int, split: str) -> np.ndarray:
    """Positions 0..n-1 drawn for one epoch, in serving order: a uniform sample without replacement of
    min(cap, n) of them (all of them, shuffled, when there is no cap). Deterministic in (seed, epoch, split);
    another epoch or seed draws another training sample. A capped validation sample holds the same positions for
    every seed (``VAL_SAMPLE_SEED``'s draw), served in the seed's order."""
    rng = np.random.default_rng([int(seed), int(epoch), STREAM_SALT[split]])
    k = n if cap is None else min(int(cap), n)
    if k == n:
        return rng.permutation(n)
    if split == "val":
        fixed = np.random.default_rng([VAL_SAMPLE_SEED, int(epoch), STREAM_SALT[split]])
        return fixed.choice(n, size=k, replace=False, shuffle=False)[rng.permutation(k)]
    return rng.choice(n, size=k, replace=False, shuffle=True)


def distinct_served(n: int, cap: int | None, seed: int, served: int) -> int:
    """How many distinct positions of 0..n-1 a training stream's first ``served`` windows hold: epochs 0, 1, ... in
    serving order (``epoch_sample``'s, split "train"), the last one cut at ``served``; at most min(n, served)."""
    seen = np.zeros(n, dtype=bool)
    epoch, left = 0, served
    while left > 0 and n > 0 and not seen.all():
        sample = epoch_sample(n, cap, seed, epoch, "train")[:left]
        seen[sample] = True
        epoch, left = epoch + 1, left - len(sample)
    return int(seen.sum())


def part_of(sample: np.ndarray, part: int, parts: int) -> np.ndarray:
    """Part ``part`` of ``parts`` disjoint, equal shares of an epoch's sample (DDP ranks x DataLoader workers):
    every part gets len // parts positions (the remainder is not served), so every rank runs the same steps."""
    if parts == 1:
        return sample
    share = len(sample) // parts
    return sample[part::parts][:share]


def expected_distinct_days(day_windows: np.ndarray, k: int) -> float:
    """Expected number of days with at least one of ``k`` windows drawn uniformly without replacement from days
    holding ``day_windows`` windows each: sum over days of 1 - C(N - n_d, k) / C(N, k)."""
    counts = np.asarray(day_windows, dtype=np.float64)
    n = counts.sum()
    if k >= n:
        return float((counts > 0).sum())
    lg = math.lgamma
    miss = [
        math.exp(lg(n - c + 1) - lg(n - c - k + 1) - lg(n + 1) + lg(n - k + 1)) if n - c >= k else 0.0 for c in counts
    ]
    return float(np.sum(1.0 - np.asarray(miss)))
