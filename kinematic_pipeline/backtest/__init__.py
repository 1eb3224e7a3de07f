"""Backtest of Buy/Sell/Hold policies (engine) and pure metrics of its outputs (metrics)."""

from kinematic_pipeline.backtest.engine import BacktestResult, buy_and_hold, run_backtest
from kinematic_pipeline.backtest.metrics import CONVENTIONS

__all__ = ["CONVENTIONS", "BacktestResult", "buy_and_hold", "run_backtest"]
