"""Small helpers that turn frames into Dagster metadata."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kinematic_pipeline.report.markdown import embedded_image as embedded_image
from kinematic_pipeline.report.markdown import markdown_table as markdown_table


def loss_curve_png(curves: dict[str, list[tuple[float, float]]], title: str, path: Path) -> bytes:
    """Plot named (x, loss) curves to ``path`` (PNG) and return its bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
    for name, points in curves.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o" if len(points) < 20 else None, label=name)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step (train) / epoch end (validation)")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path.read_bytes()


def curve_table(curves: dict[str, list[tuple[float, float]]], max_rows: int = 12) -> pl.DataFrame:
    """Long format (curve, x, loss), thinned to at most ``max_rows`` points per curve, for Markdown."""
    rows = []
    for name, points in curves.items():
        stride = max(1, -(-len(points) // max_rows))
        kept = points[::stride] + ([points[-1]] if points and (len(points) - 1) % stride else [])
        rows.extend({"curve": name, "x": float(x), "loss": float(y)} for x, y in kept)
    return pl.DataFrame(rows, schema={"curve": pl.String, "x": pl.Float64, "loss": pl.Float64})
