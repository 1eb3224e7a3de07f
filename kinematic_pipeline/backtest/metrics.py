"""Performance, behaviour and calibration metrics: pure functions of arrays.

Library conventions differ by ~20% on the same series (docs: research/prior-art.md, section C); ours are
stated once in ``conventions()`` and in each docstring. Label/action codes: ``kinematic_pipeline.variants``
(0 = Buy, 1 = Sell, 2 = Hold; label -1 means "no label" and is ignored).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kinematic_pipeline import paper_conventions as paper
from kinematic_pipeline.paper_conventions import PAPER, BacktestConfig
from kinematic_pipeline.tasks.actions import ACTION_NAMES

PERIODS_PER_YEAR, RF_ANNUAL = paper.PERIODS_PER_YEAR, paper.RF_ANNUAL  # a run's: evaluate.backtest.rf_annual
_ZERO_STD = 1e-12  # a daily std (or downside deviation) below this is treated as exactly 0


def conventions(config: BacktestConfig = PAPER, periods: int = PERIODS_PER_YEAR) -> str:
    """The paragraph every report prints: the conventions of ``run_backtest`` and of these metrics, with
    the values the run used (``settings.evaluate.backtest``)."""
    tax_rate, rf_annual, tax_year_days = config.tax_rate, config.rf_annual, config.tax_year_days
    n_boot, block_days = config.bootstrap_resamples, config.bootstrap_block_days
    tax, rf = f"{100 * tax_rate:g}%", f"{100 * rf_annual:g}%"
    return (
        f"**Backtest and metric conventions.** Daily bars, {periods} trading days per year. Actions 0 = Buy, "
        "1 = Sell, 2 = Hold are decided with data up to the close of day t and filled market-on-close at "
        "close[t]; long/cash only (no shorting, no leverage), all-in/all-out with fractional shares; Buy "
        "while long, Sell in cash and Hold keep the state (the first two are counted as invalid "
        "transitions). Costs are charged per trade side as cost_bps/1e4 of the traded notional (a Buy "
        "spends all cash including its cost). Equity is marked to the close every day, positions are left "
        f"open at the end of the period. Taxes: at the end of every full {tax_year_days}-day year we pay {tax} "
        "of that year's net realized gains (sale proceeds net of cost minus cost basis including the buy cost); "
        "losses offset gains within the same year only, with no carry-forward and no refund; a partial "
        "last year is not taxed; a bill larger than cash is covered by selling just enough shares at that "
        "close. Buy & Hold buys at the first close and is never sold, so it pays no tax. Daily returns are "
        f"simple returns of the equity curve, r_t = C_t / C_{{t-1}} - 1. Sharpe = ({periods} * mean(r) - rf) / "
        f"(std(r, ddof=1) * sqrt({periods})) with rf = {rf} per year and arithmetic annualization; Sortino "
        f"uses the same numerator over the downside deviation sqrt(mean(min(r - rf/{periods}, 0)^2)) * "
        f"sqrt({periods}) taken over all days; both are N/A (NaN) when the denominator is 0, e.g. a policy "
        "that never holds a position (Liquidation Equilibrium). Max drawdown = min_t (C_t - max_{s<=t} C_s) / "
        f"max_{{s<=t}} C_s. Annualized turnover = total traded notional / mean equity * {periods} / T. Sharpe "
        f"confidence intervals come from a circular block bootstrap of daily returns ({block_days}-day blocks, "
        f"{n_boot} resamples, percentile interval). ECE is the top-label expected calibration error over 10 "
        "equal-width confidence bins."
    )


def daily_returns(equity: np.ndarray) -> np.ndarray:
    """Simple returns r_t = C_t / C_{t-1} - 1, shape (T-1,). (The move from initial cash to C_0 is not included.)"""
    equity = np.asarray(equity, dtype=np.float64)
    return equity[1:] / equity[:-1] - 1.0


def total_return(equity: np.ndarray) -> float:
    """C_{T-1} / C_0 - 1."""
    equity = np.asarray(equity, dtype=np.float64)
    return float(equity[-1] / equity[0] - 1.0)


def _sharpe_of_returns(r: np.ndarray, rf_annual: float, periods: int) -> np.ndarray:
    """Sharpe along the last axis of r; NaN where the std is (numerically) 0 or there are < 2 returns."""
    if r.shape[-1] < 2:
        return np.full(r.shape[:-1], np.nan)
    sd = r.std(axis=-1, ddof=1)
    excess = r.mean(axis=-1) * periods - rf_annual
    with np.errstate(divide="ignore", invalid="ignore"):
        s = excess / (sd * np.sqrt(periods))
    return np.where(sd > _ZERO_STD, s, np.nan)


def sharpe(equity: np.ndarray, rf_annual: float = RF_ANNUAL, periods: int = PERIODS_PER_YEAR) -> float:
    """(mean(r) * periods - rf_annual) / (std(r, ddof=1) * sqrt(periods)), r = daily_returns(equity).

    Arithmetic annualization of the mean, annual rf subtracted after annualizing. NaN (the paper's N/A)
    when the daily std is below 1e-12: a flat curve (never holds) or constant growth has no Sharpe.
    """
    return float(_sharpe_of_returns(daily_returns(equity), rf_annual, periods))


def sortino(equity: np.ndarray, rf_annual: float = RF_ANNUAL, periods: int = PERIODS_PER_YEAR) -> float:
    """(mean(r) * periods - rf_annual) / (sqrt(mean(min(r - rf_annual/periods, 0)^2)) * sqrt(periods)).

    Downside deviation over the full sample (days above the daily rf count as 0), as quantstats and
    empyrical do. NaN when the downside deviation is below 1e-12, when there are no returns, or when the
    curve never moves (a policy that never holds: the paper's N/A; the formula alone would give a
    meaningless -sqrt(periods) from missing rf every day).
    """
    r = daily_returns(equity)
    if r.size == 0 or np.std(r) <= _ZERO_STD:
        return float("nan")
    downside = np.sqrt(np.mean(np.minimum(r - rf_annual / periods, 0.0) ** 2))
    if downside <= _ZERO_STD:
        return float("nan")
    return float((r.mean() * periods - rf_annual) / (downside * np.sqrt(periods)))


def max_drawdown(equity: np.ndarray) -> float:
    """min_t (C_t - max_{s<=t} C_s) / max_{s<=t} C_s: a number <= 0 (0 for a non-decreasing curve)."""
    equity = np.asarray(equity, dtype=np.float64)
    peak = np.maximum.accumulate(equity)
    return float(np.min((equity - peak) / peak))


def annualized_turnover(traded, equity: np.ndarray | None = None, periods: int = PERIODS_PER_YEAR) -> float:
    """sum(traded notional) / mean(equity) * periods / T.

    ``traded`` is a BacktestResult (then ``equity`` defaults to its equity), a trades array with a
    "notional" field, or an array/scalar of traded notionals. Every side counts (a round trip of the
    whole account is a turnover of 2); tax sales count too.
    """
    if hasattr(traded, "trades"):
        equity = traded.equity if equity is None else equity
        traded = traded.trades
    if isinstance(traded, np.ndarray) and traded.dtype.names and "notional" in traded.dtype.names:
        traded = traded["notional"]
    if equity is None:
        raise ValueError("annualized_turnover needs the equity curve")
    equity = np.asarray(equity, dtype=np.float64)
    return float(np.sum(traded) / equity.mean() * periods / equity.shape[0])


def summarize(result, rf_annual: float = RF_ANNUAL) -> dict:
    """The performance and behaviour of one backtest (a ``BacktestResult``), by the conventions above: the
    columns of a sweep's metrics row that depend on the backtest alone."""
    equity = result.equity
    return {
        "final_equity": float(equity[-1]),
        "total_return": total_return(equity),
        "sharpe": sharpe(equity, rf_annual),
        "sortino": sortino(equity, rf_annual),
        "max_drawdown": max_drawdown(equity),
        "turnover_annual": annualized_turnover(result),
        "n_trades": len(result.trades),
        "n_invalid": result.n_invalid,
        "taxes_paid": float(sum(amount for _, amount in result.taxes)),
        "pending_realized_gain": result.pending_realized_gain,
        "liquidation_equilibrium": liquidation_equilibrium(result.position),
        "exposure": float(np.mean(result.position)),
    }


def action_distribution(actions: np.ndarray) -> dict[str, int]:
    """Counts of each action: {"Buy": n0, "Sell": n1, "Hold": n2}."""
    counts = np.bincount(np.asarray(actions, dtype=np.int64), minlength=3)
    return {name: int(counts[k]) for k, name in enumerate(ACTION_NAMES)}


def action_rate(actions: np.ndarray) -> float:
    """Share of days whose action is Buy or Sell (not Hold); NaN for no actions."""
    actions = np.asarray(actions)
    return float(np.mean(actions != 2)) if actions.size else float("nan")


def confusion_matrix(actions: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """3x3 counts, rows = true label, columns = predicted action; days with label -1 are ignored."""
    actions, labels = np.asarray(actions, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    keep = labels >= 0
    return np.bincount(labels[keep] * 3 + actions[keep], minlength=9).reshape(3, 3)


def brier_score(probs: np.ndarray, labels: np.ndarray) -> float:
    """Multi-class Brier: mean over labelled days of sum_k (p_k - 1[label = k])^2 (range [0, 2])."""
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    keep = labels >= 0
    probs, labels = probs[keep], labels[keep]
    onehot = np.eye(probs.shape[1])[labels]
    return float(np.mean(np.sum((probs - onehot) ** 2, axis=1)))


def _bin_index(p: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bins on [0, 1], right-closed: (0, 1/n], (1/n, 2/n], ...; p = 0 goes to the first bin."""
    return np.clip(np.ceil(p * n_bins).astype(np.int64) - 1, 0, n_bins - 1)


def reliability_curve(prob_of_class: np.ndarray, is_class: np.ndarray, n_bins: int = 10):
    """(mean predicted probability, empirical frequency, count) per equal-width bin; NaN for empty bins."""
    p = np.asarray(prob_of_class, dtype=np.float64)
    y = np.asarray(is_class, dtype=np.float64)
    idx = _bin_index(p, n_bins)
    count = np.bincount(idx, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(idx, weights=p, minlength=n_bins) / count
        freq = np.bincount(idx, weights=y, minlength=n_bins) / count
    return mean_p, freq, count


def expected_calibration_error(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """Top-label ECE: sum_b (n_b / N) |accuracy_b - mean confidence_b|, confidence = max_k p_k.

    Accuracy is 1[argmax_k p_k = label]; equal-width right-closed bins on [0, 1]; labels -1 ignored.
    """
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    keep = labels >= 0
    probs, labels = probs[keep], labels[keep]
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    mean_p, freq, count = reliability_curve(conf, correct, n_bins)
    used = count > 0
    return float(np.sum(count[used] / count.sum() * np.abs(freq[used] - mean_p[used])))


def liquidation_equilibrium(position: np.ndarray) -> bool:
    """True when the policy never holds a position (the paper's absorbing cash state)."""
    return not bool(np.any(np.asarray(position) != 0))


@njit(cache=True)
def _resample_sum(r, starts_b, block, center, square):
    """sum over one circular-block resample of (r - center), or of (r - center)^2 when square."""
    n = r.shape[0]
    total = 0.0
    for k in range(starts_b.shape[0]):
        s = starts_b[k]
        stop = s + min(block, n - k * block)  # the last block is cut to n returns; stop < 2n
        for i in range(s, min(stop, n)):  # two contiguous runs, no modulo per day
            total += (r[i] - center) ** 2 if square else r[i] - center
        for i in range(0, stop - n):
            total += (r[i] - center) ** 2 if square else r[i] - center
    return total


@njit(cache=True)
def _bootstrap_sharpe_kernel(r, starts, block, rf_annual, periods, zero_std):
    """Sharpe of each resample b: blocks r[starts[b, k] : +block] (circular), cut to n returns. (n_boot,)

    Serial on purpose: a parallel region per call stalled 3-5x on a busy 2-core machine, and the
    serial kernel is ~2 ms for 2000 resamples of 940 days.
    """
    n = r.shape[0]
    n_boot, n_blocks = starts.shape
    cum = np.zeros(2 * n + 1)  # cum[i] = r[0] + ... + r[i-1] over r twice, so a wrapped block is one slice
    for i in range(2 * n):
        cum[i + 1] = cum[i] + r[i % n]
    prefix_ok = np.isfinite(cum[-1])  # a NaN/inf return would spoil every later prefix: sum directly
    out = np.empty(n_boot)
    for b in range(n_boot):
        if prefix_ok:
            total = 0.0
            for k in range(n_blocks):
                s = starts[b, k]
                total += cum[s + min(block, n - k * block)] - cum[s]
        else:
            total = _resample_sum(r, starts[b], block, 0.0, False)
        mean = total / n
        # a second pass around the mean, as numpy's std: sum(r^2) - n mean^2 would cancel
        sd = np.sqrt(_resample_sum(r, starts[b], block, mean, True) / (n - 1))
        out[b] = (mean * periods - rf_annual) / (sd * np.sqrt(periods)) if sd > zero_std else np.nan
    return out


def block_bootstrap_sharpe_ci(
    equity: np.ndarray,
    block: int = paper.BOOTSTRAP_BLOCK_DAYS,
    n_boot: int = paper.BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    rf_annual: float = RF_ANNUAL,
    periods: int = PERIODS_PER_YEAR,
) -> tuple[float, float]:
    """Percentile (alpha/2, 1 - alpha/2) interval of the Sharpe under a circular block bootstrap.

    Each resample concatenates ceil(n / block) blocks of `block` consecutive daily returns starting at
    uniform random days, wrapping around the end, cut to n returns (block is clipped to [1, n]).
    Deterministic for a seed: the block starts are ``default_rng(seed).integers(0, n, (n_boot, n_blocks))``
    and a Numba kernel sums each resample in place (no (n_boot, n) index matrix). Resamples with an
    undefined Sharpe are dropped (NaN, NaN if all are).
    """
    if int(n_boot) < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    r = np.ascontiguousarray(daily_returns(equity))
    n = r.shape[0]
    if n < 2:
        return float("nan"), float("nan")
    block = max(1, min(int(block), n))
    n_blocks = -(-n // block)
    starts = np.random.default_rng(seed).integers(0, n, size=(int(n_boot), n_blocks))
    s = _bootstrap_sharpe_kernel(r, starts, block, float(rf_annual), float(periods), _ZERO_STD)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return float("nan"), float("nan")
    low, high = np.quantile(s, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)
