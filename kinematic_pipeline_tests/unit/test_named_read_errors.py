"""Errors named for what they are: a day unit this user may not read is a permission error naming the file, never
damage (it stays in place, nothing goes to ``_damaged/``), while a file whose bytes are not Parquet still is moved
aside; a Polars panic (``PanicException``, a ``BaseException``) ends the CLI in one line like any other error."""

from __future__ import annotations

import builtins

import pytest
from polars.exceptions import PanicException

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv, refresh_catalog
from kinematic_pipeline.warehouse import catalog
from kinematic_pipeline_tests.conftest import END, START, _bars, _settings
from kinematic_pipeline_tests.helpers.cli import run_cli_in_process


@pytest.fixture
def ingested(tmp_path):
    settings = _settings(tmp_path, "wh", _bars(2))
    days = trading_days(START, END)[:5]
    materialize_raw_ohlcv(settings, days, progress=False)
    return settings, days


def test_an_unreadable_day_is_a_permission_error_naming_it_and_stays_where_it_is(ingested, monkeypatch):
    settings, days = ingested
    wh = settings.warehouse
    bars = wh.unit_dir("raw_ohlcv", days[2]) / "bars.parquet"
    bars.write_bytes(b"")  # DuckDB cannot read it; what it is, the reader's answer decides

    def denied(path, *args, **kwargs):  # as the kernel answers a file of another user's mode 0600 (tests run as root)
        if str(path) == str(bars):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(catalog, "open", denied, raising=False)
    with pytest.raises(
        PermissionError, match=rf"{bars} cannot be read by this user \(Permission denied\): not damaged"
    ):
        refresh_catalog(settings)
    assert bars.exists() and not (wh.root / "_damaged").exists()

    monkeypatch.undo()  # the same bytes, readable: damage, moved aside with its day unit
    refresh_catalog(settings)
    assert not bars.exists() and len(list((wh.root / "_damaged").glob("*/raw_ohlcv/*"))) == 1


def test_a_polars_panic_ends_the_cli_in_one_line(tmp_path, capfd, monkeypatch):
    from kinematic_pipeline import cli

    def panics(*args, **kwargs):
        raise PanicException("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(cli, "_run", panics)
    proc = run_cli_in_process(capfd, tmp_path, "info")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: called `Option::unwrap()` on a `None` value (run with --debug for the traceback)"
    ]
