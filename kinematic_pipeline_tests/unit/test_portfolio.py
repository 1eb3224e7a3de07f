"""The bounded Sharpe convention of the evidence tables and the verdict (``backtest/portfolio.py``)."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest import metrics
from kinematic_pipeline.backtest.portfolio import bounded_sharpe, excess_returns, portfolio_summary, ticker_excess

RF = 0.04


def _nearly_flat(days: int = 1009, jump_day: int = 500):
    """In cash every day but one: long at the close before ``jump_day``, which gains +0.026%, sold at its close."""
    equity = np.ones(days)
    equity[jump_day:] = 1.00026
    position = np.zeros(days, dtype=np.int8)
    position[jump_day - 1] = 1
    return equity, position


def _slow_bounded_sharpe(equity, position, rf=RF):
    """The loop twin: credit each cash day with rf, then the Sharpe of returns in excess of rf."""
    excess = []
    for t in range(1, len(equity)):
        r = equity[t] / equity[t - 1] - 1
        cash_credit = 0.0 if position[t - 1] == 1 else rf / 252
        excess.append(r + cash_credit - rf / 252)
    mean = sum(excess) / len(excess)
    sd = math.sqrt(sum((x - mean) ** 2 for x in excess) / (len(excess) - 1))
    return mean / sd * math.sqrt(252)


def test_the_nearly_flat_case_is_minus_307_in_the_papers_convention_and_bounded_here():
    equity, position = _nearly_flat()
    assert metrics.sharpe(equity, RF) == pytest.approx(-307.0, abs=0.5)  # rf subtracted, cash earning nothing
    assert metrics.sharpe(equity, 0.0) == pytest.approx(0.5, abs=0.01)
    bounded = bounded_sharpe(excess_returns(equity, position, RF))
    assert bounded == pytest.approx(_slow_bounded_sharpe(equity, position), rel=1e-9)
    assert bounded == pytest.approx(math.sqrt(252 / 1008), abs=0.01)  # one positive day in 1,008: +0.50
    assert math.isnan(bounded_sharpe(excess_returns(np.ones(100), np.zeros(100), RF)))  # never long: N/A


def test_a_random_record_agrees_with_the_loop_twin():
    rng = np.random.default_rng(4)
    position = (rng.random(300) < 0.6).astype(np.int8)
    r = np.where(np.concatenate([[0], position[:-1]]) == 1, rng.normal(0.0005, 0.01, 300), 0.0)
    equity = np.cumprod(1 + r)
    assert bounded_sharpe(excess_returns(equity, position, RF)) == pytest.approx(
        _slow_bounded_sharpe(equity, position), rel=1e-9
    )


def test_the_portfolio_summary_averages_tickers_and_counts_those_never_in_the_market():
    equity, position = _nearly_flat(300, 150)
    rng = np.random.default_rng(5)
    live = np.cumprod(1 + rng.normal(0.001, 0.01, 300))
    frames = []
    for ticker, eq, pos in (("A", equity, position), ("B", live, np.ones(300)), ("C", np.ones(300), np.zeros(300))):
        frames.append(
            pl.DataFrame(
                {
                    "variant": "v",
                    "tau": 0.01,
                    "seed": 0,
                    "ticker": ticker,
                    "cost_bps": 10.0,
                    "date": [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(300)],
                    "equity": eq,
                    "position": pl.Series(pos, dtype=pl.Int8),
                }
            )
        )
    excess = ticker_excess(pl.concat(frames), RF)
    summary = portfolio_summary(excess, ["variant", "tau"]).row(0, named=True)
    assert (summary["tickers"], summary["tickers_na"], summary["days"]) == (3, 1, 299)
    assert summary["days_in_market"] == round((1 + 299 + 0) / 3)
    ew = (excess_returns(equity, position, RF) + excess_returns(live, np.ones(300), RF) + 0.0) / 3
    assert summary["sharpe"] == pytest.approx(bounded_sharpe(ew), rel=1e-9)
