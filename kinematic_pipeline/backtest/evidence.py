"""Per-policy frames of the predictive evidence (skill.py) and the decision diagnostics (decisions.py).

Input: the predictions frame (``sweep.PREDICTIONS_SCHEMA``: variant, tau, seed, ticker, date,
p_buy, p_sell, p_hold, action, label) and, per tau, the TRAINING labels' base rates
(``skill.base_rates``: {tau: (3,) array}). One output row per
policy (variant, tau, seed), sorted by those keys. Pure: frames and arrays in, frames out; no dagster.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.decisions import decision_diagnostics, liquidation_cause, unweighted_probabilities
from kinematic_pipeline.backtest.skill import skill_table
from kinematic_pipeline.backtest.sweep import PROB_COLUMNS, bootstrap_seed

POLICY_KEYS = ("variant", "tau", "seed")
_NEEDED = (*POLICY_KEYS, "ticker", "date", *PROB_COLUMNS, "action", "label")


def _policies(predictions: pl.DataFrame):
    missing = [c for c in _NEEDED if c not in predictions.columns]
    if missing:
        raise ValueError(f"predictions lacks the columns {missing}")
    for key, group in predictions.sort([*POLICY_KEYS, "date", "ticker"]).group_by(POLICY_KEYS, maintain_order=True):
        q = group.select(PROB_COLUMNS).to_numpy().astype(np.float64)
        yield tuple(key), group, q  # rows in a fixed order, so float sums do not depend on the input's


def _rates_for(train_base_rates: dict, tau: float) -> np.ndarray:
    try:
        return np.asarray(train_base_rates[tau], dtype=np.float64)
    except KeyError:
        raise ValueError(f"no training base rates for tau={tau} (have {sorted(train_base_rates)})") from None


def skill_frame(
    predictions: pl.DataFrame,
    train_base_rates: dict[float, np.ndarray],
    class_weights,
    *,
    n_boot: int = 1000,
    block_days: int = 1,
    boot_seed: int = 0,
) -> pl.DataFrame:
    """``skill_table`` of every policy: variant, tau, seed, n_rows, n_days, then each SKILL_METRICS entry
    with its _ci_low/_ci_high. Every metric is of the unweighted probabilities p = q / w (renormalized),
    the model's estimate of the label distribution, so no decision rule enters. Days are the ``date``
    column (all tickers of a date resampled together); each policy's resamples are seeded with
    ``sweep.bootstrap_seed(boot_seed, key)``, so a row does not change when other policies are added."""
    rows = []
    for key, group, q in _policies(predictions):
        p = unweighted_probabilities(q, class_weights)
        table = skill_table(
            p,
            group["label"].to_numpy(),
            group["date"].to_physical().to_numpy(),
            _rates_for(train_base_rates, key[1]),
            n_boot=n_boot,
            block_days=block_days,
            seed=bootstrap_seed(boot_seed, key),
        )
        rows.append(dict(zip(POLICY_KEYS, key)) | table)
    return pl.DataFrame(rows)


def decision_frame(predictions: pl.DataFrame, train_base_rates: dict[float, np.ndarray], class_weights) -> pl.DataFrame:
    """``decision_diagnostics`` of every policy (its ``action`` column, the training base rates of its
    tau), plus ``liquidation_cause``: the report's sentence (it says "No Liquidation Equilibrium" when the
    policy buys). The class weights are left out of the rows (one value per run)."""
    rows = []
    for key, group, q in _policies(predictions):
        rates = _rates_for(train_base_rates, key[1])
        diag = decision_diagnostics(q, group["action"].to_numpy(), rates, class_weights)
        cause = liquidation_cause(diag)
        diag.pop("class_weights")
        rows.append(dict(zip(POLICY_KEYS, key)) | diag | {"liquidation_cause": cause})
    return pl.DataFrame(rows)
