"""Backtest of Buy/Sell/Hold policies (engine), pure metrics of its outputs (metrics), the cost sweep over stored
predictions (sweep) and the evidence statistics; import each module where it is used (no eager re-exports)."""
