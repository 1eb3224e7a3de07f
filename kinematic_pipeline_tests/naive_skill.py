"""Slow, obviously correct twins of kinematic_pipeline/backtest/skill.py and decisions.py: plain Python
loops over rows, pairs and resamples (the bootstrap materializes every resampled row)."""

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


def naive_metrics(probs, labels, reference):
    """Every skill_table metric on one sample (labels -1 dropped first)."""
    rows = [(p, int(y)) for p, y in zip(probs, labels) if y >= 0]
    probs = [p for p, _ in rows]
    labels = [y for _, y in rows]
    ref = [reference] * len(labels)
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
    }
    for name in ("log_loss", "brier"):
        r = out[f"{name}_reference"]
        out[f"{name}_skill"] = 1 - out[name] / r if r > 0 else float("nan")
    return out


def naive_skill_table(probs, labels, days, reference, n_boot, block_days, seed, alpha=0.05):
    """Twin of skill_table: the same block starts, but every resample is built row by row and scored with
    the naive metrics."""
    keep = [i for i, y in enumerate(labels) if y >= 0]
    probs = [probs[i] for i in keep]
    labels = [int(labels[i]) for i in keep]
    days = [days[i] for i in keep]
    distinct = sorted(set(days))
    rows_of = {d: [i for i, x in enumerate(days) if x == d] for d in distinct}
    n_days = len(distinct)
    out = {"n_rows": len(labels), "n_days": n_days}
    point = naive_metrics(probs, labels, reference)
    block = max(1, min(block_days, n_days))
    n_blocks = -(-n_days // block)
    starts = np.random.default_rng(seed).integers(0, n_days, size=(n_boot, n_blocks))
    draws = {k: [] for k in point}
    for b in range(n_boot):
        picked = []
        for s in starts[b]:
            for j in range(block):
                picked.append((int(s) + j) % n_days)
        picked = picked[:n_days]
        rows = [i for d in picked for i in rows_of[distinct[d]]]
        m = naive_metrics([probs[i] for i in rows], [labels[i] for i in rows], reference)
        for k, v in m.items():
            draws[k].append(v)
    for k, v in point.items():
        out[k] = v
        values = np.array([x for x in draws[k] if math.isfinite(x)])
        low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2]) if values.size else (np.nan, np.nan)
        out[f"{k}_ci_low"], out[f"{k}_ci_high"] = float(low), float(high)
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
