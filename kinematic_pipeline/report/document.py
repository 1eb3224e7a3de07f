"""One Markdown report: the run's context, the tables and figures with caption-like explanations, and
the backtest conventions (always included, so every number can be read against its definition)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import polars as pl

from kinematic_pipeline.report.markdown import markdown_table

ANSWERS_NOTE = (
    "_Each question: its answer, the number behind it and, where its seeds are replicates, their agreement; the "
    "Verdict below gives each test._"
)


def _describe(key: str, headings: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """Heading and explanation of ``key``; a key that extends a known one ("tau_sweep_NVDA") shares its
    caption and shows the rest in the heading; an unknown key is its own heading."""
    base = max((k for k in headings if key == k or key.startswith(k)), key=len, default=None)
    if base is None:
        return key, ""
    heading, caption = headings[base]
    suffix = key[len(base) :].strip("_:/- ")
    return (f"{heading} ({suffix})" if suffix else heading), caption


def _link(path: Path, relative_to: Path | None) -> str:
    target = Path(os.path.relpath(path, relative_to)) if relative_to is not None else Path(path)
    return quote(target.as_posix())


def render_report(
    title: str,
    context: dict[str, str],
    tables: dict[str, pl.DataFrame],
    figures: dict[str, Path],
    conventions: str,
    relative_to: Path | None = None,
    lead: tuple[str, ...] = (),
    table_headings: dict[str, tuple[str, str]] | None = None,
    figure_headings: dict[str, tuple[str, str]] | None = None,
    answers: list[str] | None = None,
    sections: dict[str, tuple[str, ...]] | None = None,
) -> str:
    """The Markdown report. ``context`` is shown as a list (profile, test period, tickers, tau, cost, run
    id...); tables and figures, keyed by name, keep their order, each under its heading with its explanation
    (``table_headings``, ``figure_headings``: name -> (heading, caption), ``stages/report_titles.py``); figure links
    are relative to ``relative_to``, the folder the report is written to (None: paths as given);
    ``conventions`` (``backtest.metrics.CONVENTIONS``) closes the document; the ``lead`` tables (the verdict)
    come first, under "Verdict", before the other tables; ``answers`` (``report.answers.answer_lines``), one line per
    question, open the document under "Answers", before the context; ``sections`` ({heading: name prefixes}) gathers
    the tables and figures whose names start so under their own heading after the others (a task's section)."""
    table_headings, figure_headings = table_headings or {}, figure_headings or {}
    lines = [f"# {title}", ""]
    if answers:
        lines += ["## Answers", "", ANSWERS_NOTE, "", *answers, "", "## Context", ""]
    lines += [f"- **{name}**: {value}" for name, value in context.items()]
    for key in (k for k in lead if k in tables):
        heading, caption = _describe(key, table_headings)
        lines += ["", "## Verdict", "", f"_{heading}_", ""] + ([caption, ""] if caption else [])
        lines += [markdown_table(tables[key])]
    tables = {k: v for k, v in tables.items() if k not in lead}
    grouped = {h: tuple(prefixes) for h, prefixes in (sections or {}).items()}

    def section_of(key: str) -> str | None:
        return next((h for h, prefixes in grouped.items() if key.startswith(prefixes)), None)

    def table_lines(keys) -> list[str]:
        out = []
        for key in keys:
            heading, caption = _describe(key, table_headings)
            out += ["", f"### {heading}", ""] + ([caption, ""] if caption else []) + [markdown_table(tables[key])]
        return out

    def figure_lines(keys) -> list[str]:
        out = []
        for key in keys:
            heading, caption = _describe(key, figure_headings)
            out += ["", f"### {heading}", "", f"![{heading}]({_link(figures[key], relative_to)})"]
            out += ["", caption] if caption else []
        return out

    own_tables = [k for k in tables if section_of(k) is None]
    own_figures = [k for k in figures if section_of(k) is None]
    lines += (["", "## Tables"] if own_tables else []) + table_lines(own_tables)
    lines += (["", "## Figures"] if own_figures else []) + figure_lines(own_figures)
    for heading in grouped:
        keys = [k for k in tables if section_of(k) == heading], [k for k in figures if section_of(k) == heading]
        if keys[0] or keys[1]:
            lines += ["", f"## {heading}", *table_lines(keys[0]), *figure_lines(keys[1])]
    lines += ["", "## Conventions", "", conventions, ""]
    return "\n".join(lines)
