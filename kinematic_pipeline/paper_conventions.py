"""The paper's backtest numbers, one home: the engine's and the metrics' defaults and ``EvalConfig``'s read them
here by reference (a run's own values are ``settings.evaluate``'s). No imports: configuration reads it cheaply."""

INITIAL_CASH = 10_000.0  # the paper's starting capital
TAX_RATE = 0.32  # short-term capital gains, on net realized gains per tax year
TAX_YEAR_DAYS = 252  # trading days per tax year
PERIODS_PER_YEAR = 252  # trading days per year, for every annualization
RF_ANNUAL = 0.04  # the paper's risk-free rate for 2023-2025, in Sharpe and Sortino
COSTS_BPS = (0.0, 5.0, 10.0, 20.0, 30.0)  # per trade side, swept for every backtest
BOOTSTRAP_RESAMPLES = 2000  # circular block bootstrap of the Sharpe
BOOTSTRAP_BLOCK_DAYS = 20
