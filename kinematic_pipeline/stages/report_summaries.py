"""The report group's stages as summaries, like every other stage's (``Predictions``, ``Backtests``): each runs its
stage and returns what its asset shows, in plain values (``Markdown`` renders, a ``Path`` links); the assets convert
them at the boundary (``orchestration.metadata.dagster_metadata``). No dagster here."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from kinematic_pipeline.config import Settings
from kinematic_pipeline.report.markdown import Markdown, embedded_image, markdown_table
from kinematic_pipeline.stages.pooled import materialize_pooled_backtests
from kinematic_pipeline.stages.report_titles import all_titles
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.day_units import day_lock
from kinematic_pipeline.warehouse.layout import VERDICT_FILE


@dataclass(frozen=True)
class Summary:
    """What an asset of the report group shows: ``values``, metadata as plain values."""

    values: dict

    def metadata(self) -> dict:
        return self.values


REPORT_LOCK = ("reports", "report-group")  # .locks/reports/report-group.lock
REPORT_LOCK_TIMEOUT_S = 3600.0


@contextlib.contextmanager
def one_report_writer(settings: Settings):
    """The warehouse's report-group lock, held for the whole of each of its assets: a product and its pin are
    written, and read back with their pin checked, by one run at a time. Two ``materialize`` commands with
    different KP_SEEDS would otherwise render one run's tables under the other run's pin; the second waits (saying
    for whom) and then finds the first's products, whose pin names the other policies, refused by name."""
    with day_lock(settings.warehouse, *REPORT_LOCK, timeout_s=REPORT_LOCK_TIMEOUT_S):
        yield


def pooled_backtests(settings: Settings) -> Summary:
    """``pooled_backtests``: the rows of each pooled record and their folder."""
    with one_report_writer(settings):
        frames = materialize_pooled_backtests(settings)
    return Summary(
        {**{f"{name} rows": f.height for name, f in frames.items()}, "folder": settings.warehouse.pooled_dir}
    )


def verdict(settings: Settings) -> Summary:
    """``verdict``: the table and its file."""
    from kinematic_pipeline.stages.verdict import materialize_verdict

    with one_report_writer(settings):
        table = materialize_verdict(settings)
    path = settings.warehouse.report_tables_dir / VERDICT_FILE
    return Summary({"verdict": Markdown(markdown_table(table)), "path": path})


def paper_tables(settings: Settings) -> Summary:
    """``paper_tables``: every table under its title, the headline (mean Sharpe and return per variant at the
    report's tau and cost) and ``tables.md``."""
    from kinematic_pipeline.stages.report import headline, materialize_paper_tables

    with one_report_writer(settings):
        built, path, metrics = materialize_paper_tables(settings)
    ev, titles = settings.evaluate, all_titles(settings)
    tables = {name: Markdown(f"**{titles[name]}**\n\n" + markdown_table(f)) for name, f in built.items()}
    top = headline(metrics, ev.report_tau, ev.report_cost_bps)
    return Summary({**tables, "headline": Markdown(markdown_table(top)), "path": path})


def figures(settings: Settings) -> Summary:
    """``figures``: every figure inline and their folder."""
    from kinematic_pipeline.stages.report import materialize_figures

    with one_report_writer(settings):
        paths = materialize_figures(settings)
    shown = {name: Markdown(embedded_image(p.read_bytes(), name)) for name, p in paths.items()}
    return Summary({**shown, "folder": next(iter(paths.values())).parent})


def report(settings: Settings, run_id: str) -> Summary:
    """``report``: the verdict, ``report.md`` (its first 60,000 characters inline) and the reports folder."""
    from kinematic_pipeline.stages.report import materialize_report

    with one_report_writer(settings):
        path: Path = materialize_report(settings, {"dagster run": run_id})
        table = settings.warehouse.report_tables_dir / VERDICT_FILE
        verdict_text = markdown_table(exact.read_parquet(table)) if table.exists() else "-"
    return Summary(
        {
            "verdict": Markdown(verdict_text),
            "path": path,
            "report": Markdown(path.read_text()[:60_000]),
            "folder": settings.warehouse.reports_dir,
        }
    )
