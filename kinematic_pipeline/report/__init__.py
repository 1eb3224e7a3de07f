"""The paper's tables, figures and one Markdown report, from the metrics, equity, predictions, bars and
kinematics frames. Pure: polars, numpy and matplotlib (Agg, no pyplot); never dagster."""

from kinematic_pipeline.report.document import render_report
from kinematic_pipeline.report.figures import diagnostics_png, equity_curves_png, sweeps_png
from kinematic_pipeline.report.kinematic_figures import kinematic_manifold_png, responsiveness_png
from kinematic_pipeline.report.markdown import embedded_image, markdown_table
from kinematic_pipeline.report.tables import (
    absolute_performance,
    calibration_summary,
    cost_sensitivity,
    liquidation_equilibrium,
    risk_adjusted,
    tau_sweep,
)

__all__ = [
    "absolute_performance",
    "calibration_summary",
    "cost_sensitivity",
    "diagnostics_png",
    "embedded_image",
    "equity_curves_png",
    "kinematic_manifold_png",
    "liquidation_equilibrium",
    "markdown_table",
    "render_report",
    "responsiveness_png",
    "risk_adjusted",
    "sweeps_png",
    "tau_sweep",
]
