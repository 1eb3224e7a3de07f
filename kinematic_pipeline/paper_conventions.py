"""The paper's backtest numbers, one home, and ``BacktestConfig``: the conventions of one run, passed whole to
the engine (``backtest.engine``), the sweep (``backtest.sweep``) and the conventions paragraph
(``backtest.metrics.conventions``). Their defaults read the numbers here by reference, and a run's own values are
``settings.evaluate.backtest``. Only the standard library: configuration reads it cheaply."""

from __future__ import annotations

import math
from dataclasses import dataclass

INITIAL_CASH = 10_000.0  # the paper's starting capital
TAX_RATE = 0.32  # short-term capital gains, on net realized gains per tax year
TAX_YEAR_DAYS = 252  # trading days per tax year
PERIODS_PER_YEAR = 252  # trading days per year, for every annualization
RF_ANNUAL = 0.04  # the paper's risk-free rate for 2023-2025, in Sharpe and Sortino
COSTS_BPS = (0.0, 5.0, 10.0, 20.0, 30.0)  # per trade side, swept for every backtest
BOOTSTRAP_RESAMPLES = 2000  # circular block bootstrap of the Sharpe
BOOTSTRAP_BLOCK_DAYS = 20


@dataclass(frozen=True)
class BacktestConfig:
    """How a backtest is run and scored: the costs swept, the account, the tax and the Sharpe's bootstrap.
    Checked when built: a bad value is a ValueError naming the field."""

    costs_bps: tuple[float, ...] = COSTS_BPS  # per trade side, swept for every backtest (sorted, no duplicates)
    initial_cash: float = INITIAL_CASH
    tax_rate: float = TAX_RATE  # short-term capital gains, on net realized gains per tax year
    tax_year_days: int = TAX_YEAR_DAYS
    rf_annual: float = RF_ANNUAL  # in Sharpe and Sortino
    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES  # 0 skips the Sharpe bootstrap (its interval is NaN)
    bootstrap_block_days: int = BOOTSTRAP_BLOCK_DAYS
    bootstrap_seed: int = 0  # each series' resamples: ``sweep.bootstrap_seed(bootstrap_seed, key)``

    def __post_init__(self) -> None:
        costs = tuple(float(c) for c in self.costs_bps)
        if not costs:
            raise ValueError("backtest.costs_bps is empty")
        if len(set(costs)) != len(costs):
            raise ValueError(f"backtest.costs_bps has duplicates: {costs}")
        bad = [c for c in costs if not (math.isfinite(c) and 0 <= c < 1e4)]
        if bad:
            raise ValueError(f"backtest.costs_bps must be in [0, 10000): {bad}")
        object.__setattr__(self, "costs_bps", costs)
        if not (math.isfinite(self.initial_cash) and self.initial_cash > 0):
            raise ValueError(f"backtest.initial_cash must be > 0, got {self.initial_cash}")
        if not (0 <= self.tax_rate <= 1):
            raise ValueError(f"backtest.tax_rate must be in [0, 1], got {self.tax_rate}")
        if int(self.tax_year_days) < 1:
            raise ValueError(f"backtest.tax_year_days must be >= 1, got {self.tax_year_days}")
        if int(self.bootstrap_resamples) < 0 or int(self.bootstrap_block_days) < 1:
            raise ValueError(
                f"backtest.bootstrap_resamples={self.bootstrap_resamples}, bootstrap_block_days="
                f"{self.bootstrap_block_days}: expected resamples >= 0 and blocks >= 1 day"
            )


PAPER = BacktestConfig()  # the paper's conventions: every library default
