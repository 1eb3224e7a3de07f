"""Backtest of Buy/Sell/Hold policies (engine), pure metrics of its outputs (metrics) and the cost sweep
over stored predictions (sweep)."""

from kinematic_pipeline.backtest.engine import BacktestResult, buy_and_hold, run_backtest
from kinematic_pipeline.backtest.metrics import conventions
from kinematic_pipeline.backtest.sweep import SweepResult, run_sweep

__all__ = ["conventions", "BacktestResult", "SweepResult", "buy_and_hold", "run_backtest", "run_sweep"]
