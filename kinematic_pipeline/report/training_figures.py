"""A foundation's or adapter's loss curves: the PNG its folder keeps (``loss.png``) and a thinned table of them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from kinematic_pipeline.report.figures import save_figure


def loss_curves_png(curves: dict[str, list[tuple[float, float]]], title: str, path: Path) -> bytes:
    """Plot named (x, loss) curves to ``path`` (PNG) and return its bytes."""
    fig = Figure(figsize=(5, 3), layout="constrained")
    ax = fig.subplots()
    for name, points in curves.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o" if len(points) < 20 else None, label=name)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path)


def curve_table(curves: dict[str, list[tuple[float, float]]], max_rows: int = 12) -> pl.DataFrame:
    """Long format (curve, x, loss), thinned to at most ``max_rows`` points per curve, for Markdown."""
    rows = []
    for name, points in curves.items():
        stride = max(1, -(-len(points) // max_rows))
        kept = points[::stride] + ([points[-1]] if points and (len(points) - 1) % stride else [])
        rows.extend({"curve": name, "x": float(x), "loss": float(y)} for x, y in kept)
    return pl.DataFrame(rows, schema={"curve": pl.String, "x": pl.Float64, "loss": pl.Float64})
