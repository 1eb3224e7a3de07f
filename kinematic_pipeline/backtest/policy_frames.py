"""Per-policy frames of the predictive evidence (skill.py, skill_seeds.py) and the decision diagnostics
(decisions.py).

Input: the predictions frame (``buy_sell_hold.PREDICTIONS_SCHEMA``: variant, tau, seed, ticker, date,
p_buy, p_sell, p_hold (the de-weighted p), action, label, optionally other label columns such as close-to-close
labels) and,
per tau, the TRAINING labels' base rates (``skill.base_rates``: {tau: (3,) array}) of the same outcome, or
per tau a ``FoldRates``: each walk-forward fold's, which the rows of its test days are scored against.
``skill_frame`` and ``decision_frame``: one row per policy (variant, tau, seed); ``seed_mean_skill_frame``:
one row per (variant, tau), the mean over seeds with a day-bootstrap interval of that mean;
``skill_beyond_reference_frame``: one row per (variant, tau), the seed mean of its log-loss skill minus a reference
forecaster's on the same rows (``backtest.volatility_reference``). The intervals resample circular blocks of
``SkillOptions.block_days`` consecutive test days (``skill.DEFAULT_BLOCK_DAYS`` = 20 unless told). Rows are
sorted by their keys. Pure: frames and arrays in, frames out; no dagster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.decisions import decision_diagnostics, liquidation_cause
from kinematic_pipeline.backtest.skill import DEFAULT_BLOCK_DAYS, skill_table
from kinematic_pipeline.backtest.skill_seeds import seed_mean_skill, seed_mean_skill_difference
from kinematic_pipeline.backtest.sweep import bootstrap_seed
from kinematic_pipeline.tasks.actions import PROB_COLUMNS
from kinematic_pipeline.tasks.buy_sell_hold import at_tau

POLICY_KEYS = ("variant", "tau", "seed")
BEYOND = "log_loss_skill_beyond_reference"  # skill_beyond_reference_frame's metric (and _ci_low, _ci_high, _seed_std)
BEYOND_TRIVIAL = "log_loss_skill_beyond_trivial"  # the same, beyond the trivial probe's rows (science-6 M-D)
_NEEDED = (*POLICY_KEYS, "ticker", "date", *PROB_COLUMNS, "action")


def _groups(predictions: pl.DataFrame, keys: tuple[str, ...], label_column: str = "label"):
    """(key, rows) per group of ``keys``, rows sorted by (seed, date, ticker) so that float sums do not
    depend on the input's order."""
    missing = [c for c in (*_NEEDED, label_column) if c not in predictions.columns]
    if missing:
        raise ValueError(f"predictions lacks the columns {missing}")
    rows = predictions.sort([*POLICY_KEYS, "date", "ticker"])
    for key, group in rows.group_by(list(keys), maintain_order=True):
        yield tuple(key), group


def _probs_of(group: pl.DataFrame) -> np.ndarray:
    return group.select(PROB_COLUMNS).to_numpy().astype(np.float64)


def _policies(predictions: pl.DataFrame, label_column: str = "label"):
    for key, group in _groups(predictions, POLICY_KEYS, label_column):
        yield key, group, _probs_of(group)


# the calibrated prior (``stages.base_rates``): each fold's validation-day base rates, the zero point of a model that
# learned nothing once calibrated; a control row of the information table beside the variants
PRIOR = "calibrated_prior"
PRIOR_DISPLAY_NAME = "Calibrated prior (no information)"
PRIOR_DATA_SEEN = "the labels of each fold's validation days (what calibration fits on)"


@dataclasses.dataclass(frozen=True)
class FoldRates:
    """The training base rates of each walk-forward fold at one tau: ``rates[i]`` (3,) are the shares of
    fold i's training labels, ``starts[i]`` its first test day (time order). A row dated d is scored against
    the fold whose test period holds d: the last one starting on or before d."""

    starts: tuple[dt.date, ...]
    rates: tuple[np.ndarray, ...]

    def _fold_index(self, dates: pl.Series) -> np.ndarray:
        days = dates.cast(pl.Date).to_physical().to_numpy().astype(np.int64)
        starts = np.array([(s - dt.date(1970, 1, 1)).days for s in self.starts], dtype=np.int64)
        index = np.searchsorted(starts, days, side="right") - 1
        if (index < 0).any():
            first = dt.date(1970, 1, 1) + dt.timedelta(int(days[index < 0].min()))
            raise ValueError(
                f"{first} is before the first fold's test period ({self.starts[0]}): no training base rates"
            )
        return index

    def rows(self, dates: pl.Series) -> np.ndarray:
        """(n, 3): each row's fold's training base rates."""
        return np.stack([np.asarray(r, dtype=np.float64) for r in self.rates])[self._fold_index(dates)]

    def pooled(self, dates: pl.Series) -> np.ndarray:
        """(3,): the folds' training base rates weighted by their share of the rows (one fold: its rates)."""
        counts = np.bincount(self._fold_index(dates), minlength=len(self.rates))
        used = [(c / counts.sum(), np.asarray(r, dtype=np.float64)) for c, r in zip(counts, self.rates) if c]
        return used[0][1] if len(used) == 1 else np.sum([w * r for w, r in used], axis=0)


def _rates_for(train_base_rates: dict, tau: float) -> np.ndarray | FoldRates:
    try:
        rates = train_base_rates[tau]
    except KeyError:
        raise ValueError(f"no training base rates for tau={tau} (have {sorted(train_base_rates)})") from None
    return rates if isinstance(rates, FoldRates) else np.asarray(rates, dtype=np.float64)


def _reference(train_base_rates: dict, tau: float, group: pl.DataFrame) -> np.ndarray:
    """The rows' reference predictor: the (3,) training base rates at tau, or (n, 3) each row's fold's."""
    rates = _rates_for(train_base_rates, tau)
    return rates.rows(group["date"]) if isinstance(rates, FoldRates) else rates


@dataclasses.dataclass(frozen=True)
class SkillOptions:
    """How the skill frames draw their day-bootstrap intervals and which labels they score."""

    n_boot: int = 1000  # resamples of days (0: no interval)
    block_days: int = DEFAULT_BLOCK_DAYS  # consecutive test days per resampled block (1: single days)
    boot_seed: int = 0  # each row's draws: ``sweep.bootstrap_seed(boot_seed, key)``
    label_column: str = "label"  # the labels scored (e.g. the close-to-close ``label_close``)


DEFAULT_SKILL = SkillOptions()


def skill_frame(
    predictions: pl.DataFrame, train_base_rates: dict, options: SkillOptions = DEFAULT_SKILL
) -> pl.DataFrame:
    """``skill_table`` of every policy: variant, tau, seed, n_rows, n_days, then each SKILL_METRICS entry
    with its _ci_low/_ci_high. Every probability metric is of the stored (de-weighted) probabilities p, the
    model's estimate of the label distribution, so no decision rule enters; the
    policy's balanced accuracy is of its ``action`` column. Labels are ``options.label_column``. Days are the
    ``date`` column (all tickers of a date resampled together); each policy's resamples are seeded with
    ``sweep.bootstrap_seed(options.boot_seed, key)``, so a row does not change when other policies are added."""
    rows = []
    label_column = options.label_column
    for key, group, p in _policies(predictions, label_column):
        table = skill_table(
            p,
            group[label_column].to_numpy(),
            group["date"].to_physical().to_numpy(),
            _reference(train_base_rates, key[1], group),
            actions=group["action"].to_numpy(),
            n_boot=options.n_boot,
            block_days=options.block_days,
            seed=bootstrap_seed(options.boot_seed, key),
        )
        rows.append(dict(zip(POLICY_KEYS, key)) | table)
    return pl.DataFrame(rows)


def seed_mean_skill_frame(
    predictions: pl.DataFrame, train_base_rates: dict, options: SkillOptions = DEFAULT_SKILL
) -> pl.DataFrame:
    """``skill_seeds.seed_mean_skill`` of every (variant, tau): variant, tau, n_seeds, n_rows, n_days, then
    each SKILL_METRICS entry (the mean over seeds) with _ci_low/_ci_high (the day-bootstrap interval of the
    seed mean) and _seed_std. The metrics are those of ``skill_frame``; the day draws are seeded with
    ``sweep.bootstrap_seed(options.boot_seed, (variant, tau))`` and shared by the seeds."""
    rows = []
    label_column = options.label_column
    for key, group in _groups(predictions, ("variant", "tau"), label_column):
        seeds = group.partition_by("seed", maintain_order=True)
        table = seed_mean_skill(
            [_probs_of(g) for g in seeds],
            [g[label_column].to_numpy() for g in seeds],
            [g["date"].to_physical().to_numpy() for g in seeds],
            [_reference(train_base_rates, key[1], g) for g in seeds],
            actions=[g["action"].to_numpy() for g in seeds],
            n_boot=options.n_boot,
            block_days=options.block_days,
            seed=bootstrap_seed(options.boot_seed, key),
        )
        rows.append({"variant": key[0], "tau": key[1]} | table)
    return pl.DataFrame(rows)


def skill_beyond_reference_frame(
    predictions: pl.DataFrame,
    reference: pl.DataFrame,
    train_base_rates: dict,
    options: SkillOptions = DEFAULT_SKILL,
) -> pl.DataFrame:
    """Per (variant, tau) of ``predictions``: the mean over seeds of its log-loss skill minus the ``reference``
    forecaster's, paired on the same ticker-days (``skill_seeds.seed_mean_skill_difference``), with the block
    interval of that mean and the std over seeds. Columns: variant, tau, BEYOND, BEYOND_ci_low, BEYOND_ci_high,
    BEYOND_seed_std, paired_rows (labelled rows scored, all seeds), paired_days.

    ``reference``: predictions-frame rows of one forecaster, one row per (tau, ticker, date); a policy row is paired
    with the reference row of its tau, ticker and date, and rows without one are left out of both sides. Both
    sides' stored (de-weighted) probabilities p are scored on the policy rows' ``options.label_column`` against the
    training base rates of their tau (per fold with ``FoldRates``). The day draws are seeded with ``sweep.bootstrap_seed(options.boot_seed, (variant, tau))``, as
    ``seed_mean_skill_frame``'s. A variant equal to the reference's own is left out."""
    label_column = options.label_column
    if reference.select(pl.struct("tau", "ticker", "date").is_duplicated().any()).item():
        raise ValueError("reference holds two rows of one (tau, ticker, date)")
    own = set(reference["variant"].unique().to_list()) if reference.height else set()
    renamed = {c: f"reference_{c}" for c in PROB_COLUMNS}
    rows = []
    for key, group in _groups(predictions, ("variant", "tau"), label_column):
        if key[0] in own:
            continue
        forecast = reference.filter(at_tau(key[1])).select("ticker", "date", *PROB_COLUMNS).rename(renamed)
        paired = group.join(forecast, on=["ticker", "date"], how="inner").sort("seed", "date", "ticker")
        seeds = paired.partition_by("seed", maintain_order=True) if paired.height else []
        if not seeds:
            continue
        table = seed_mean_skill_difference(
            [_probs_of(g) for g in seeds],
            [g.select(renamed.values()).to_numpy().astype(np.float64) for g in seeds],
            [g[label_column].to_numpy() for g in seeds],
            [g["date"].to_physical().to_numpy() for g in seeds],
            [_reference(train_base_rates, key[1], g) for g in seeds],
            n_boot=options.n_boot,
            block_days=options.block_days,
            seed=bootstrap_seed(options.boot_seed, key),
        )
        rows.append(
            {
                "variant": key[0],
                "tau": key[1],
                BEYOND: table["difference"],
                f"{BEYOND}_ci_low": table["ci_low"],
                f"{BEYOND}_ci_high": table["ci_high"],
                f"{BEYOND}_seed_std": table["seed_std"],
                "paired_rows": table["n_rows"],
                "paired_days": table["n_days"],
            }
        )
    schema = {"variant": pl.String, "tau": pl.Float64}
    schema |= {f"{BEYOND}{s}": pl.Float64 for s in ("", "_ci_low", "_ci_high", "_seed_std")}
    return pl.DataFrame(rows, schema=schema | {"paired_rows": pl.Int64, "paired_days": pl.Int64})


def decision_frame(predictions: pl.DataFrame, train_base_rates: dict[float, np.ndarray], class_weights) -> pl.DataFrame:
    """``decision_diagnostics`` of every policy (its ``action`` column, the training base rates of its
    tau: with folds, theirs weighted by the policy's test rows in each), plus ``liquidation_cause``: the
    report's sentence (it says "No Liquidation Equilibrium" when the policy buys). The class weights are left
    out of the rows (one value per run)."""
    rows = []
    for key, group, p in _policies(predictions):
        rates = _rates_for(train_base_rates, key[1])
        rates = rates.pooled(group["date"]) if isinstance(rates, FoldRates) else rates
        diag = decision_diagnostics(p, group["action"].to_numpy(), rates, class_weights)
        cause = liquidation_cause(diag)
        diag.pop("class_weights")
        rows.append(dict(zip(POLICY_KEYS, key)) | diag | {"liquidation_cause": cause})
    return pl.DataFrame(rows)
