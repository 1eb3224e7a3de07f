"""Slow, obviously correct twins of kinematic_pipeline/backtest/skill.py, skill_seeds.py and decisions.py:
plain Python loops over rows, pairs, resamples and seeds (the bootstrap materializes every resampled row)."""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-15


def naive_base_rates(labels):
    known = [int(y) for y in labels if y >= 0]
    return np.array([sum(1 for y in known if y == k) / len(known) for k in range(3)])


def naive_log_loss(probs, labels):
    terms = [-math.log(min(max(float(p[int(y)]), EPS), 1.0)) for p, y in zip(probs, labels) if y >= 0]
    return sum(terms) / len(terms) if terms else float("nan")


def naive_brier(probs, labels):
    terms = []
    for p, y in zip(probs, labels):
        if y >= 0:
            terms.append(sum((float(p[k]) - (1.0 if k == y else 0.0)) ** 2 for k in range(3)))
    return sum(terms) / len(terms) if terms else float("nan")


def naive_confusion(predicted, labels):
    conf = [[0, 0, 0] for _ in range(3)]
    for a, y in zip(predicted, labels):
        if y >= 0:
            conf[int(y)][int(a)] += 1
    return conf


def naive_balanced_accuracy(predicted, labels):
    conf = naive_confusion(predicted, labels)
    recalls = [conf[k][k] / sum(conf[k]) for k in range(3) if sum(conf[k]) > 0]
    return sum(recalls) / len(recalls) if recalls else float("nan")


def naive_macro_f1(predicted, labels):
    conf = naive_confusion(predicted, labels)
    f1s = []
    for k in range(3):
        tp = conf[k][k]
        fn = sum(conf[k]) - tp
        fp = sum(conf[j][k] for j in range(3)) - tp
        if tp + fn + fp > 0:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s) if f1s else float("nan")


def naive_auc(scores, is_class):
    pos = [float(s) for s, c in zip(scores, is_class) if c]
    neg = [float(s) for s, c in zip(scores, is_class) if not c]
    if not pos or not neg:
        return float("nan")
    wins = 0.0
    for a in pos:
        for b in neg:
            wins += 1.0 if a > b else 0.5 if a == b else 0.0
    return wins / (len(pos) * len(neg))


def _per_row(reference, n):
    """The reference of each of n rows: a (3,) reference repeated, or the given (n, 3) rows."""
    return list(reference) if np.ndim(reference) == 2 else [reference] * n


def naive_metrics(probs, labels, reference, actions=None):
    """Every skill_table metric on one sample (labels -1 dropped first); actions None: the policy's
    balanced accuracy is NaN. reference: (3,) for every row, or one (3,) per row."""
    actions = [None] * len(labels) if actions is None else actions
    refs = _per_row(reference, len(labels))
    rows = [(p, int(y), a, r) for p, y, a, r in zip(probs, labels, actions, refs) if y >= 0]
    probs = [p for p, _, _, _ in rows]
    labels = [y for _, y, _, _ in rows]
    acted = [a for _, _, a, _ in rows]
    ref = [r for _, _, _, r in rows]
    predicted = [max(range(3), key=lambda k, p=p: (p[k], -k)) for p in probs]  # argmax, first on ties
    out = {
        "log_loss": naive_log_loss(probs, labels),
        "log_loss_reference": naive_log_loss(ref, labels),
        "brier": naive_brier(probs, labels),
        "brier_reference": naive_brier(ref, labels),
        "balanced_accuracy": naive_balanced_accuracy(predicted, labels),
        "macro_f1": naive_macro_f1(predicted, labels),
        "auc_buy": naive_auc([p[0] for p in probs], [y == 0 for y in labels]),
        "auc_sell": naive_auc([p[1] for p in probs], [y == 1 for y in labels]),
        "policy_balanced_accuracy": float("nan") if None in acted else naive_balanced_accuracy(acted, labels),
    }
    for name in ("log_loss", "brier"):
        r = out[f"{name}_reference"]
        out[f"{name}_skill"] = 1 - out[name] / r if r > 0 else float("nan")
    return out


def _labelled(probs, labels, days, actions, reference=None):
    keep = [i for i, y in enumerate(labels) if y >= 0]
    acted = None if actions is None else [int(actions[i]) for i in keep]
    out = [probs[i] for i in keep], [int(labels[i]) for i in keep], [days[i] for i in keep], acted
    if reference is None:
        return out
    refs = _per_row(reference, len(labels))
    return (*out, [refs[i] for i in keep])


def naive_resampled_days(n_days, n_boot, block_days, seed):
    """Per resample, the list of drawn day positions (0..n_days-1), block by block, as skill.py draws them."""
    block = max(1, min(block_days, n_days // 4))  # at least four blocks a resample (skill.MIN_BLOCKS)
    n_blocks = -(-n_days // block)
    starts = np.random.default_rng(seed).integers(0, n_days, size=(n_boot, n_blocks))
    out = []
    for b in range(n_boot):
        picked = []
        for s in starts[b]:
            for j in range(block):
                picked.append((int(s) + j) % n_days)
        out.append(picked[:n_days])
    return out


def naive_resample_metrics(probs, labels, days, actions, reference, distinct, picked):
    """naive_metrics of the rows of the drawn days (a day drawn twice contributes its rows twice)."""
    rows = [i for d in picked for i, x in enumerate(days) if x == distinct[d]]
    acted = None if actions is None else [actions[i] for i in rows]
    refs = _per_row(reference, len(labels))
    return naive_metrics([probs[i] for i in rows], [labels[i] for i in rows], [refs[i] for i in rows], acted)


def _interval(values, alpha):
    values = np.array([x for x in values if math.isfinite(x)])
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2]) if values.size else (np.nan, np.nan)
    return float(low), float(high)


def naive_skill_table(probs, labels, days, reference, n_boot, block_days, seed, alpha=0.05, actions=None):
    """Twin of skill_table: the same block starts, but every resample is built row by row and scored with
    the naive metrics."""
    probs, labels, days, actions, reference = _labelled(probs, labels, days, actions, reference)
    distinct = sorted(set(days))
    out = {"n_rows": len(labels), "n_days": len(distinct)}
    point = naive_metrics(probs, labels, reference, actions)
    draws = {k: [] for k in point}
    for picked in naive_resampled_days(len(distinct), n_boot, block_days, seed):
        for k, v in naive_resample_metrics(probs, labels, days, actions, reference, distinct, picked).items():
            draws[k].append(v)
    for k, v in point.items():
        out[k] = v
        out[f"{k}_ci_low"], out[f"{k}_ci_high"] = _interval(draws[k], alpha)
    return out


def naive_seed_mean_skill(seeds, reference, n_boot, block_days, seed, alpha=0.05):
    """Twin of skill_seeds.seed_mean_skill. seeds: list of (probs, labels, days, actions). One draw of the
    union's days; per resample each seed's naive metrics, then their mean; the interval of those means.
    reference: (3,) for every row, or a list with one (n_s, 3) per seed."""
    per_seed_refs = reference if isinstance(reference, list) else [reference] * len(seeds)
    seeds = [_labelled(*one, ref) for one, ref in zip(seeds, per_seed_refs)]
    distinct = sorted({d for _, _, days, _, _ in seeds for d in days})
    points = [naive_metrics(p, y, r, a) for p, y, _, a, r in seeds]
    out = {"n_seeds": len(seeds), "n_rows": sum(len(y) for _, y, _, _, _ in seeds), "n_days": len(distinct)}
    means = {k: [] for k in points[0]}
    for picked in naive_resampled_days(len(distinct), n_boot, block_days, seed):
        per_seed = [naive_resample_metrics(p, y, d, a, r, distinct, picked) for p, y, d, a, r in seeds]
        for k in means:
            means[k].append(sum(m[k] for m in per_seed) / len(per_seed))
    for k in points[0]:
        values = [pt[k] for pt in points]
        out[k] = sum(values) / len(values)
        out[f"{k}_ci_low"], out[f"{k}_ci_high"] = _interval(means[k], alpha)
        out[f"{k}_seed_std"] = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
    return out


# ---------------------------------------------------------------------------------------------- decisions


def naive_unweighted(q, w):
    out = []
    for row in q:
        x = [float(row[k]) / w[k] for k in range(3)]
        out.append([v / sum(x) for v in x])
    return np.array(out)


def naive_threshold_actions(p, m):
    out = []
    for row in p:
        edge = float(row[0]) - float(row[1])
        out.append(0 if edge > m else 1 if edge < -m else 2)
    return np.array(out)


def naive_choose_margin(p, labels, grid):
    best_m, best_score = None, -1.0
    for m in grid:
        score = naive_balanced_accuracy(naive_threshold_actions(p, m), labels)
        if score >= best_score:  # ties: the later (larger) m of an increasing grid
            best_m, best_score = m, score
    return float(best_m)
