"""Shared fixtures: settings pointing at a temporary warehouse, and a short synthetic range."""

from __future__ import annotations

import datetime as dt

import pytest

from kinematic_pipeline.config import load_settings

SHORT_START, SHORT_END = dt.date(2021, 3, 1), dt.date(2021, 4, 30)


@pytest.fixture
def warehouse(tmp_path):
    return tmp_path / "warehouse"


@pytest.fixture
def ci_settings(warehouse):
    """The ci profile on the synthetic source, over two months, in a temporary warehouse."""
    return load_settings("ci", warehouse=warehouse, start_date=SHORT_START, end_date=SHORT_END, env={})
