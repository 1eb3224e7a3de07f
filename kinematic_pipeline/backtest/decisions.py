"""Decision diagnostics of a Buy/Sell/Hold policy and a second decision rule: pure functions of arrays.

The classifier is trained with weighted cross-entropy w = [w_buy, w_sell, w_hold] (paper: [2, 10, 1]), so
its softmax approximates q_i ∝ w_i p_i, p the calibrated probabilities. Its argmax therefore prefers Buy
over Sell only when p_buy / p_sell > w_sell / w_buy (= 5), and with no information at all (p = the base
rates) it takes ``no_information_action`` = argmax_i w_i * base_rate_i: Sell on the paper's data
(base rates B/S/H ≈ .25/.23/.52 at tau 1%, weighted .51/2.32/.52).

The predictions store p (de-weighted, calibrated); the diagnostics apply the weights where the argmax does.
Margin convention: ``buy_sell_margin`` is ln(p_buy / p_sell) of the UNWEIGHTED probabilities,
= ln(q_buy / q_sell) + ln(w_sell / w_buy), and it is compared with ln(w_sell / w_buy) = ln 5: a margin
above ln 5 is exactly q_buy > q_sell, i.e. the argmax ranks Buy above Sell. (The same statement as
"ln(q_buy / q_sell) against 0".)

The second rule, the margin rule (``tasks.rules.MarginRule``), trades on the stored p directly.
Codes: ``tasks.actions``. No dagster and no file I/O here.
"""

from __future__ import annotations

import numpy as np

from kinematic_pipeline.tasks.actions import ACTION_NAMES, BUY, HOLD, SELL, check_probabilities, class_weight_vector

MARGIN_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)  # reported quantiles of buy_sell_margin
FOLLOWS_PRIOR_SHARE = 0.95  # a policy taking the no-information action on >= this share of rows "follows the prior"
_TINY = np.finfo(np.float64).tiny  # probabilities are clipped here before a log (float32 softmax can be 0)

# liquidation_cause_code's answers
NO_LIQUIDATION = "none"  # the policy buys at least once, so it holds a position
CAUSE_CLASS_WEIGHTS = "class_weights"  # Sell is the no-information action and the policy follows it
CAUSE_NO_SEPARATION = "no_separation"  # the policy departs from the prior, but Buy never outranks Sell
CAUSE_HOLD_DOMINATES = "hold_dominates"  # Buy outranks Sell on some rows, but Hold outranks Buy there


def no_information_action(base_rates, class_weights) -> int:
    """argmax_i w_i * base_rate_i: what the weighted-CE argmax picks when the inputs carry no information.
    Ties go to the lowest code (numpy's argmax)."""
    rates = np.asarray(base_rates, dtype=np.float64)
    if rates.shape != (3,):
        raise ValueError(f"base_rates must have 3 entries, got {rates.shape}")
    return int(np.argmax(class_weight_vector(class_weights) * rates))


def buy_sell_margin(p, class_weights) -> np.ndarray:
    """ln(p_buy / p_sell) of the unweighted probabilities p (n, 3), taken as ln(q_buy / q_sell) + ln(w_sell / w_buy)
    of the weighted q ∝ w ⊙ p, (n,): a class with p = 0 (a rule's one-hot) is clipped in q, so two zeros give
    ln(w_sell / w_buy), the argmax's tie."""
    q = check_probabilities(p) * class_weight_vector(class_weights)
    w = class_weight_vector(class_weights)
    return np.log(np.maximum(q[:, BUY], _TINY) / w[BUY]) - np.log(np.maximum(q[:, SELL], _TINY) / w[SELL])


def decision_diagnostics(p, actions, train_base_rates, class_weights) -> dict:
    """One flat row describing how the argmax policy of a weighted-CE classifier decides, on its test rows.

    p: (n, 3) the classifier's de-weighted probabilities (as the predictions store them; q ∝ w ⊙ p is its
    weighted softmax); actions: (n,) the policy's codes; train_base_rates:
    ``skill.base_rates`` of the training period's labels. Keys: the training base rates and their weighted
    values, the no-information action, quantiles of ``buy_sell_margin`` and the share above its threshold
    ln(w_sell / w_buy), the share of those rows on which Hold still outranks Buy, the share of rows whose
    action differs from the no-information action, and the action shares.
    """
    p = check_probabilities(p)
    actions = np.asarray(actions).astype(np.int64)
    if actions.shape != (p.shape[0],) or actions.size == 0:
        raise ValueError(f"actions must have shape ({p.shape[0]},) with n >= 1, got {actions.shape}")
    w = class_weight_vector(class_weights)
    rates = np.asarray(train_base_rates, dtype=np.float64)
    if rates.shape != (3,) or not (np.isfinite(rates).all() and (rates >= 0).all()):
        raise ValueError(f"train_base_rates must be 3 non-negative shares, got {train_base_rates}")
    no_info = no_information_action(rates, w)
    margin = buy_sell_margin(p, w)
    threshold = float(np.log(w[SELL] / w[BUY]))
    above = margin > threshold
    hold_wins = w[HOLD] * p[:, HOLD] >= w[BUY] * p[:, BUY]  # q_hold >= q_buy: the weights applied to p
    row: dict = {"n_rows": int(p.shape[0]), "class_weights": [float(x) for x in w]}
    for code, name in enumerate(ACTION_NAMES):
        key = name.lower()
        row[f"base_rate_{key}"] = float(rates[code])
        row[f"weighted_rate_{key}"] = float(w[code] * rates[code])
    row["no_information_action"] = no_info
    row["margin_threshold"] = threshold
    for level in MARGIN_QUANTILES:
        row[f"margin_q{round(100 * level):02d}"] = float(np.quantile(margin, level))
    row["margin_max"] = float(margin.max())
    row["share_margin_above_threshold"] = float(above.mean())
    row["share_hold_outranks_buy_above_threshold"] = float(hold_wins[above].mean()) if above.any() else float("nan")
    row["share_differs_from_no_information"] = float(np.mean(actions != no_info))
    for code, name in enumerate(ACTION_NAMES):
        row[f"share_{name.lower()}"] = float(np.mean(actions == code))
    return row


def liquidation_cause_code(diagnostics: dict) -> str:
    """Which of the diagnostics explains a policy that never buys (so never holds a position).

    In order: it buys -> NO_LIQUIDATION; Sell is the no-information action and the policy takes it on at
    least FOLLOWS_PRIOR_SHARE of rows -> CAUSE_CLASS_WEIGHTS (the weighting sets the action; the inputs do
    not move it); Buy outranks Sell (margin > ln(w_sell / w_buy)) on no row -> CAUSE_NO_SEPARATION;
    otherwise Hold outranks Buy on every row where Buy beats Sell -> CAUSE_HOLD_DOMINATES.
    """
    d = diagnostics
    if d["share_buy"] > 0:
        return NO_LIQUIDATION
    follows_prior = 1.0 - d["share_differs_from_no_information"] >= FOLLOWS_PRIOR_SHARE
    if d["no_information_action"] == SELL and follows_prior:
        return CAUSE_CLASS_WEIGHTS
    if d["share_margin_above_threshold"] == 0:
        return CAUSE_NO_SEPARATION
    return CAUSE_HOLD_DOMINATES


def _fmt(x: float) -> str:
    return f"{x:.2f}".removeprefix("0") if 0 <= x < 1 else f"{x:.2f}"


def liquidation_cause(diagnostics: dict) -> str:
    """One sentence for the report's Liquidation Equilibrium row: the cause (``liquidation_cause_code``)
    and the numbers behind it, from ``decision_diagnostics``."""
    d = diagnostics
    code = liquidation_cause_code(d)
    if code == NO_LIQUIDATION:
        return f"No Liquidation Equilibrium: the policy buys on {d['share_buy']:.1%} of rows."
    weights = ", ".join(f"{x:g}" for x in d["class_weights"])
    no_info = ACTION_NAMES[d["no_information_action"]]
    rates = " / ".join(f"{n[0]} {_fmt(d[f'weighted_rate_{n.lower()}'])}" for n in ACTION_NAMES)
    prior = f"the no-information action under weights [{weights}] is {no_info} (weighted base rates {rates})"
    follow = 1.0 - d["share_differs_from_no_information"]
    bar = f"ln {np.exp(d['margin_threshold']):g}"
    above = d["share_margin_above_threshold"]
    separation = (
        f"{1 - above:.0%} of margins ln(p_buy/p_sell) are below {bar} (95th percentile {d['margin_q95']:.2f}, "
        f"{bar} = {d['margin_threshold']:.2f})"
    )
    if code == CAUSE_CLASS_WEIGHTS:
        return (
            f"Class weighting: {prior} and the policy takes it on {follow:.0%} of rows; {separation}: "
            "the model never separates Buy from Sell by enough to leave the prior."
        )
    if code == CAUSE_NO_SEPARATION:
        return (
            f"No Buy/Sell separation: {prior}; the policy departs from it on {1 - follow:.0%} of rows, but "
            f"{separation}: Buy never outranks Sell."
        )
    return (
        f"Hold dominates: {prior}; Buy outranks Sell on {above:.0%} of rows (margin above {bar}), but Hold "
        "outranks Buy on every one of them."
    )


def buy_threshold(class_weights) -> str:
    """What the class-weighted argmax demands of Buy, in the probabilities p the weighted softmax q ∝ w ⊙ p stands
    for: ln(p_buy / p_sell) > ln(w_sell / w_buy) and ln(p_buy / p_hold) > ln(w_hold / w_buy), with the run's w."""
    w = class_weight_vector(class_weights)
    return (
        f"ln(p_buy/p_sell) > ln(w_sell/w_buy) = ln({w[SELL]:g}/{w[BUY]:g}) = {np.log(w[SELL] / w[BUY]):.2f} and "
        f"ln(p_buy/p_hold) > ln(w_hold/w_buy) = {np.log(w[HOLD] / w[BUY]):.2f}"
    )
