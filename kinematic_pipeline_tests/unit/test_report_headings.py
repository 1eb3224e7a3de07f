"""The report read at a glance: every table and figure title of a ``ci`` run with the volatility task under 100
characters, its details in the caption below, and what the captions would repeat stated once in the Conventions."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from kinematic_pipeline.config import EvalConfig, load_settings
from kinematic_pipeline.stages.report import report_conventions
from kinematic_pipeline.stages.report_titles import FIGURE_HEADINGS, convention_notes, rule_caption, table_headings

TITLE_CHARS = 100
REPEATABLE_CHARS = 80  # a sentence longer than this is said once


@pytest.fixture
def settings(tmp_path):
    return load_settings("ci", warehouse=tmp_path, env={"KP_TASKS": "bsh,vol"})


def test_every_table_and_figure_title_is_under_100_characters(settings):
    headings = table_headings(settings)
    assert {"verdict", "task_vol5_forecasters", "task_vol5_targeting"} <= set(headings)  # the vol task's too
    titles = {name: title for name, (title, _) in {**headings, **FIGURE_HEADINGS}.items()}
    long = {name: len(title) for name, title in titles.items() if len(title) >= TITLE_CHARS}
    assert not long


def test_no_long_caption_sentence_appears_in_more_than_one_caption(settings):
    captions = [c for _, c in table_headings(settings).values()] + [c for _, c in FIGURE_HEADINGS.values()]
    counts = Counter(s for c in captions for s in {s.strip() for s in re.split(r"(?<=\.)\s+", c)})
    repeated = {s: n for s, n in counts.items() if n > 1 and len(s) > REPEATABLE_CHARS}
    assert not repeated


def test_the_rule_note_is_in_the_conventions_once_and_the_rule_tables_point_there(settings):
    text = report_conventions(settings.evaluate, convention_notes(settings))
    assert text.count(rule_caption(settings)) == 1
    assert "\n- **decision rules**: " in text and "\n- **portfolio Sharpe**: " in text
    headings = table_headings(settings)
    assert all(rule_caption(settings) not in title + caption for title, caption in headings.values())
    assert "(Conventions: decision rules)" in headings["absolute_performance"][1]
    assert report_conventions(EvalConfig()) == report_conventions(EvalConfig(), {})  # no notes: no list


def test_the_swept_horizons_tables_point_to_the_reported_ones_caption(settings):
    headings = table_headings(settings)
    assert "Diebold-Mariano" in headings["task_vol5_forecasters"][1]
    assert headings["task_vol1_forecasters"][1] == "As the next-5-session forecasters table's caption says, at h = 1."
