"""The universe of the signal tables: one seeded draw for every fold, and point in time by a membership file."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.predictors import base as predict
from kinematic_pipeline.sources.membership import members_on
from kinematic_pipeline_tests.helpers.cli import assert_one_line_error, cli_env

CSV = "Symbol,Security,Date added\nAAA,A Inc,1990-01-02\nBBB,B Inc,2020-06-22\nCCC,C Inc,2019-01-02\n"
FOLD_2019 = [dt.date(2019, 1, 2), dt.date(2019, 12, 31)]
FOLD_2021 = [dt.date(2021, 1, 4), dt.date(2021, 12, 31)]


def test_members_on_a_day_are_those_added_on_or_before_it(tmp_path):
    path = tmp_path / "members.csv"
    path.write_text(CSV)
    assert members_on(path, dt.date(2019, 1, 1)) == {"AAA"}
    assert members_on(path, dt.date(2019, 1, 2)) == {"AAA", "CCC"}
    assert members_on(path, dt.date(2022, 1, 3)) == {"AAA", "BBB", "CCC"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("Symbol,Security\nAAA,A\n", "has no column 'Date added'"),
        ("Symbol,Date added\nAAA,1990-01-02\nBBB,soon\n", "row 3 column 'Date added': 'soon' is not a date"),
        ("Symbol,Date added\n,1990-01-02\n", "row 2 column 'Symbol' is empty"),
    ],
)
def test_a_bad_membership_file_names_its_row_and_column(tmp_path, text, message):
    path = tmp_path / f"bad{abs(hash(text))}.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        members_on(path, dt.date(2020, 1, 1))


def _universe(monkeypatch, tmp_path, env: dict) -> dict[str, list[str]]:
    """universe_tickers of two folds over 40 tickers (T00..T39; T39 trades only in 2021), the shards stubbed (a
    parquet source: its tickers are not known when the settings load)."""
    env = {"KP_SOURCE": "parquet", "KP_SOURCE_PATH": str(tmp_path / "bars.parquet"), **env}
    settings = load_settings("ci", warehouse=tmp_path, env=env)
    every = [f"T{k:02d}" for k in range(40)]
    monkeypatch.setattr(predict, "_tickers", lambda s, a, days: every if days[0].year != 2019 else every[:-1])
    monkeypatch.setattr(predict, "evaluation_days", lambda s, a, fold=None: FOLD_2019 + FOLD_2021)
    monkeypatch.setattr(predict, "evaluation_tickers", lambda s, a, days: ["T00", "T01"])
    return {
        str(days[0].year): predict.universe_tickers(settings, "spline_tokens", days) for days in (FOLD_2019, FOLD_2021)
    }


def test_the_universe_sample_is_drawn_once_for_every_fold(monkeypatch, tmp_path):
    import dataclasses

    original = load_settings

    def with_sample(*args, **kwargs):
        s = original(*args, **kwargs)
        return dataclasses.replace(s, evaluate=dataclasses.replace(s.evaluate, universe_tickers=10))

    monkeypatch.setattr(f"{__name__}.load_settings", with_sample)
    folds = _universe(monkeypatch, tmp_path, {})
    assert len(folds["2021"]) == 10 and {"T00", "T01"} <= set(folds["2021"])
    assert set(folds["2019"]) == set(folds["2021"]) - {"T39"}  # the same draw; 2019 lacks what it never traded
    assert len(set(folds["2019"]) | set(folds["2021"])) == 10  # 10 names seen over the folds, not 10 per fold


def test_a_membership_file_keeps_each_folds_members_on_its_first_test_day(monkeypatch, tmp_path):
    path = tmp_path / "members.csv"
    path.write_text("Symbol,Date added\n" + "".join(f"T{k:02d},{2020 if k % 2 else 2000}-06-01\n" for k in range(40)))
    folds = _universe(monkeypatch, tmp_path, {"KP_MEMBERSHIP_FILE": str(path)})
    assert folds["2019"] == [f"T{k:02d}" for k in range(0, 40, 2)]  # the odd names joined in 2020
    assert folds["2021"] == [f"T{k:02d}" for k in range(40)]


def test_a_membership_file_matching_no_ticker_is_refused_where_the_universe_is_built(monkeypatch, tmp_path):
    path = tmp_path / "other_index.csv"
    path.write_text("Symbol,Date added\nZZA,2000-01-03\nZZB,2000-01-03\n")
    with pytest.raises(ValueError) as info:
        _universe(monkeypatch, tmp_path, {"KP_MEMBERSHIP_FILE": str(path)})
    line = str(info.value)
    assert "\n" not in line and str(path) in line and "ZZA, ZZB" in line and "T00" in line, line
    late = tmp_path / "late.csv"  # the right names, all added after the first fold's first test day
    late.write_text("Symbol,Date added\n" + "".join(f"T{k:02d},2020-06-01\n" for k in range(40)))
    with pytest.raises(ValueError, match=f"membership file {late} .* leaves no ticker in the universe on 2019-01-02"):
        _universe(monkeypatch, tmp_path, {"KP_MEMBERSHIP_FILE": str(late)})


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "does not exist"),
        ("Symbol,Security\nSYN000,A\n", "has no column 'Date added'"),
        ("Symbol,Date added\nSYN000,2000-01-03\nSYN001,soon\n", "row 3 column 'Date added': 'soon' is not a date"),
        ("Symbol,Date added\nAAPL,2000-01-03\nMSFT,1990-01-02\n", "matches none of the 8 tickers of the synthetic"),
    ],
)
def test_a_bad_membership_file_is_refused_in_one_line_when_the_settings_load(tmp_path, text, message):
    """Through the real CLI (``info`` loads the settings and nothing else): the file, what is wrong, exit status 1."""
    path = tmp_path / "members.csv"
    if text is not None:
        path.write_text(text)
    env = {**cli_env(tmp_path, None, None), "KP_MEMBERSHIP_FILE": str(path)}
    proc = subprocess.run(
        [sys.executable, "-m", "kinematic_pipeline", "info"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert_one_line_error(proc, f"membership file {path}", message)
    assert not (tmp_path / "warehouse").exists()  # refused before anything was made
    if "matches none" in message:
        assert "AAPL, MSFT" in proc.stderr and "SYN000" in proc.stderr
        path.write_text("Symbol,Date added\nSYN003,2000-01-03\nAAPL,2000-01-03\n")  # one name of the source: taken
        args = [sys.executable, "-m", "kinematic_pipeline", "info"]
        proc = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True)
        assert "membership file" not in proc.stderr and "existing warehouse" in proc.stderr  # on to the next check


def test_a_membership_file_matching_no_ticker_of_a_parquet_source_is_refused_when_the_settings_load(tmp_path):
    """A file source's tickers are its ticker column, read without its bars: a membership file of another index is
    refused by ``info`` (the settings alone), not first where a universe is built after the tokens."""
    import polars as pl

    bars = tmp_path / "bars.parquet"
    day = dt.date(2021, 1, 4)
    pl.DataFrame(
        {"Symbol": ["NVDA", "AAPL"], "date": [day, day], **{c: [1.0, 2.0] for c in ("open", "high", "low", "close")}}
    ).with_columns(volume=pl.lit(100.0)).write_parquet(bars)
    path = tmp_path / "members.csv"
    path.write_text("Symbol,Date added\nZZA,2000-01-03\nZZB,2000-01-03\n")
    env = {**cli_env(tmp_path, "parquet", bars), "KP_MEMBERSHIP_FILE": str(path)}
    args = [sys.executable, "-m", "kinematic_pipeline", "info"]
    proc = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert_one_line_error(proc, f"membership file {path}", "matches none of the 2 tickers of the parquet source")
    assert "ZZA, ZZB" in proc.stderr and "AAPL" in proc.stderr
    path.write_text("Symbol,Date added\nZZA,2000-01-03\nNVDA,2000-01-03\n")  # one name of the source: taken
    proc = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert "membership file" not in proc.stderr, proc.stderr
