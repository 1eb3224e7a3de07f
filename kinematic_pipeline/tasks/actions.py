"""Buy/Sell/Hold as numbers: the class index of the classifier, the label code and the action code of the backtest.

The leaf of ``tasks/``: the engine, the metrics and the variants' rules read the codes here, and
``check_probabilities`` / ``check_labels`` say what a probability array and a label array of the task are.
"""

from __future__ import annotations

import numpy as np

BUY, SELL, HOLD = 0, 1, 2
UNKNOWN_LABEL = -1  # a label whose next-day return does not exist yet
ACTION_NAMES = ("Buy", "Sell", "Hold")  # indexed by code
ACTION_KEYS = ("buy", "sell", "hold")  # the same, as column and metadata keys
# The stored probabilities p, in code order: the label distribution the policy forecasts, its softmax calibrated
# (``backtest.calibration``, models and probes) and de-weighted (``stored_probabilities``); float64.
PROB_COLUMNS = ("p_buy", "p_sell", "p_hold")
# The network's (or probe's) own softmax, as it output it (the class-weighted q of a weighted-CE classifier,
# float32): what the paper's rule takes the argmax of.
SOFTMAX_COLUMNS = ("softmax_buy", "softmax_sell", "softmax_hold")


def check_labels(labels) -> np.ndarray:
    """int64 labels (n,), each -1 (unknown), 0, 1 or 2; a ValueError naming the first row that is not."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    labels = labels.astype(np.int64)
    bad = (labels < UNKNOWN_LABEL) | (labels > HOLD)
    if bad.any():
        raise ValueError(f"labels must be -1 (unknown), 0, 1 or 2; row {int(np.argmax(bad))} is {labels[bad][0]}")
    return labels


def check_probabilities(probs, n: int | None = None) -> np.ndarray:
    """float64 probabilities (n, 3) in code order, finite and >= 0; a ValueError naming the first row that is not."""
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[1] != 3:
        raise ValueError(f"probs must have shape (n, 3) in the order Buy, Sell, Hold, got {probs.shape}")
    if n is not None and probs.shape[0] != n:
        raise ValueError(f"probs has {probs.shape[0]} rows but labels has {n}")
    bad = ~np.isfinite(probs).all(axis=1) | (probs < 0).any(axis=1)
    if bad.any():
        raise ValueError(f"probs must be finite and >= 0; row {int(np.argmax(bad))} is {probs[bad][0]}")
    return probs


def class_weight_vector(class_weights) -> np.ndarray:
    """The class weights [Buy, Sell, Hold] as a float array, checked: three positive finite numbers."""
    w = np.asarray(class_weights, dtype=np.float64)
    if w.shape != (3,) or not (np.isfinite(w).all() and (w > 0).all()):
        raise ValueError(f"class_weights must be 3 positive numbers [Buy, Sell, Hold], got {class_weights}")
    return w


def unweighted_probabilities(q, class_weights) -> np.ndarray:
    """p = (q / w) / sum(q / w) per row: the weighted-CE softmax q (n, 3) turned back into probabilities."""
    q = check_probabilities(q)
    p = q / class_weight_vector(class_weights)
    total = p.sum(axis=1, keepdims=True)
    if (total <= 0).any():
        raise ValueError(f"row {int(np.argmax(total[:, 0] <= 0))} of q is all zero")
    return p / total


def stored_probabilities(softmax, class_weights=None) -> np.ndarray:
    """The p the predictions store for a softmax (n, 3) as it is stored (float32): de-weighted with the
    ``class_weights`` it was trained with (``unweighted_probabilities``, in float64), or the softmax itself as float64
    without weights (a rule's one-hot action)."""
    q = np.asarray(softmax, dtype=np.float32).astype(np.float64)
    return q if class_weights is None else unweighted_probabilities(q, class_weights)
