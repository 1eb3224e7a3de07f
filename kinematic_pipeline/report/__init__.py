"""The paper's tables, figures and one Markdown report, from the metrics, equity, predictions, bars and
kinematics frames. Pure: polars, numpy and matplotlib (Agg, no pyplot); never dagster.

A face without eager imports: ``from kinematic_pipeline.report.markdown import markdown_table`` (or the tables)
never loads matplotlib; the names below load their module on first use."""

from __future__ import annotations

import importlib

_HOMES = {
    "render_report": "document",
    "diagnostics_png": "figures",
    "equity_curves_png": "figures",
    "sweeps_png": "figures",
    "kinematic_manifold_png": "kinematic_figures",
    "responsiveness_png": "kinematic_figures",
    "embedded_image": "markdown",
    "markdown_table": "markdown",
    "absolute_performance": "tables",
    "calibration_summary": "tables",
    "cost_sensitivity": "tables",
    "liquidation_equilibrium": "tables",
    "risk_adjusted": "tables",
    "tau_sweep": "tables",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
