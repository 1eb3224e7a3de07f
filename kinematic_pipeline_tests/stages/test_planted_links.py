"""A symbolic link planted in the warehouse never makes an ordinary run damage a file outside it (issue 55, item 1).

Through the stage functions that do the writing: a day's lock linked outside is refused in one line naming it (an
ingest of that day once truncated the outside file to 0 bytes), so is the catalog's lock; ``report.md``, the
verdict's table and a figure linked outside are replaced by the files themselves (a rename over the link), the
outside file's bytes left as they were."""

from __future__ import annotations

import json
import os

import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.warehouse.catalog import catalog_connection
from kinematic_pipeline.warehouse.layout import LOCKS_DIR
from kinematic_pipeline.warehouse.no_follow import append_text
from kinematic_pipeline_tests.conftest import SHORT_END, SHORT_START

PRECIOUS = b"a file outside the warehouse, not the pipeline's to write\n"


def _outside(tmp_path, name: str = "precious.txt"):
    """A file outside the warehouse (the warehouse is ``tmp_path / "warehouse"`` or a sibling of it)."""
    path = tmp_path / "outside" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(PRECIOUS)
    return path


def _plant(link, target) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    os.symlink(target, link)


def test_a_days_lock_linked_outside_is_refused_naming_it_and_the_outside_file_keeps_its_bytes(ci_settings, tmp_path):
    day = trading_days(SHORT_START, SHORT_END)[3]
    outside = _outside(tmp_path)
    lock = ci_settings.warehouse.root / LOCKS_DIR / "raw_ohlcv" / f"{day}.lock"
    _plant(lock, outside)
    with pytest.raises(ValueError, match=f"^{lock} is a symbolic link"):
        materialize_raw_ohlcv(ci_settings, [day], progress=False)
    assert outside.read_bytes() == PRECIOUS  # the old lock opened it "a+" and truncated it to 0 bytes
    assert lock.is_symlink() and not ci_settings.warehouse.shard("raw_ohlcv", day).exists()
    lock.unlink()  # the link removed, as the line says: the day is written
    materialize_raw_ohlcv(ci_settings, [day], progress=False)
    assert ci_settings.warehouse.shard("raw_ohlcv", day).exists() and not lock.is_symlink()
    assert outside.read_bytes() == PRECIOUS


def test_a_shard_folder_linked_outside_is_refused_naming_it_and_receives_nothing(ci_settings, tmp_path):
    days = trading_days(SHORT_START, SHORT_END)[:3]
    elsewhere = tmp_path / "outside" / "shards"
    elsewhere.mkdir(parents=True)
    folder = ci_settings.warehouse.root / "raw_ohlcv"
    _plant(folder, elsewhere)  # the asset's folder a link out: the renamed files once landed there
    with pytest.raises(ValueError, match=f"^{folder} is a symbolic link to {elsewhere}, outside the warehouse"):
        materialize_raw_ohlcv(ci_settings, days, progress=False)
    assert not any(elsewhere.rglob("*"))
    inside = ci_settings.warehouse.root / "moved_raw_ohlcv"  # a link that stays inside the warehouse is fine
    inside.mkdir()
    _plant(folder, inside)
    materialize_raw_ohlcv(ci_settings, days, progress=False)
    assert any(inside.rglob("*.parquet")) and not any(elsewhere.rglob("*"))


def test_a_catalog_lock_linked_outside_is_refused_and_creates_nothing_there(tmp_path):
    root = tmp_path / "warehouse"
    root.mkdir()
    nowhere = tmp_path / "outside" / "created-through-the-link"
    nowhere.parent.mkdir()
    _plant(root / ".catalog.lock", nowhere)  # a dangling link: the old lock created the file it points at
    with pytest.raises(ValueError, match=f"^{root / '.catalog.lock'} is a symbolic link"):
        with catalog_connection(root):
            pass
    assert not nowhere.exists()


def pinned_tables(tmp_path, monkeypatch):
    """ci settings over ``tmp_path / "warehouse"`` with the tables ``paper_tables`` would have written, pinned as it
    pins them, so that ``materialize_report`` renders (no predictions or models to check)."""
    from kinematic_pipeline.pins import evaluation_digest, pin_evaluation
    from kinematic_pipeline.run_keys import run_keys_digest
    from kinematic_pipeline.stages import report
    from kinematic_pipeline.stages.report_titles import ALL_TITLES, OPTIONAL_TABLES
    from kinematic_pipeline.warehouse.layout import TABLES_PIN_FILE

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    wh = settings.warehouse
    tables = wh.report_tables_dir
    tables.mkdir(parents=True)
    for name in ALL_TITLES:
        if name not in OPTIONAL_TABLES:
            pl.DataFrame({"x": [1]}).write_parquet(tables / f"{name}.parquet")
    (tables / report.CONTEXT_FILE).write_text(json.dumps({"profile": "ci"}))
    pin_evaluation(wh, tables / TABLES_PIN_FILE, evaluation_digest(wh), run_keys_digest(settings))
    monkeypatch.setattr(report, "check_inputs_current", lambda settings: None)
    return settings


def test_report_md_linked_outside_is_replaced_by_the_report(tmp_path, monkeypatch):
    from kinematic_pipeline.stages import report

    settings = pinned_tables(tmp_path, monkeypatch)
    wh = settings.warehouse
    outside = _outside(tmp_path)
    for target in (outside, tmp_path / "outside" / "report-was-here.md"):  # an outside file, then a dangling link
        _plant(wh.report_file, target)
        path = report.materialize_report(settings)
        assert path == wh.report_file and not path.is_symlink()
        assert path.read_text().startswith("# Kinematic Tokenization: backtest report")
        assert outside.read_bytes() == PRECIOUS  # `materialize --select report` once overwrote it with the report
        assert not (tmp_path / "outside" / "report-was-here.md").exists()


def test_the_verdicts_table_linked_outside_is_replaced_by_the_table(tmp_path, monkeypatch):
    from kinematic_pipeline.stages import verdict

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})

    def not_computable(_settings):
        raise ValueError("the verdict needs Buy & Hold and at least one strategy on common days")

    monkeypatch.setattr(verdict, "compute_verdict", not_computable)
    outside = _outside(tmp_path)
    link = settings.warehouse.report_tables_dir / "verdict.md"
    _plant(link, outside)
    verdict.materialize_verdict(settings)
    assert not link.is_symlink() and "not computable" in link.read_text()
    assert outside.read_bytes() == PRECIOUS


def test_a_figure_linked_outside_is_replaced_by_the_figure(tmp_path):
    from kinematic_pipeline.report.figures import no_data_figure

    outside = _outside(tmp_path, "precious.png")
    link = tmp_path / "warehouse" / "reports" / "figures" / "sweeps.png"
    _plant(link, outside)
    data = no_data_figure("sweeps", link)
    assert not link.is_symlink() and link.read_bytes() == data and data.startswith(b"\x89PNG")
    assert outside.read_bytes() == PRECIOUS
    assert no_data_figure("sweeps", tmp_path / "again.png") == data  # the same figure, the same bytes


def test_an_appended_trace_is_never_written_through_a_link(tmp_path):
    outside = _outside(tmp_path)
    link = tmp_path / "trace" / "rank0.tsv"
    _plant(link, outside)
    with pytest.raises(ValueError, match=f"^{link} is a symbolic link"):
        append_text(link, "0\ttrain\t0\t2021-03-01\t5\n")
    assert outside.read_bytes() == PRECIOUS


def test_lightnings_logs_and_checkpoints_linked_outside_are_unlinked_never_followed(ci_settings, tmp_path):
    """Lightning's CSV logger and checkpoint write in place; a link planted at their folders is removed first, and a
    run folder that is itself linked out of the warehouse is refused."""
    from kinematic_pipeline.training.trainer import build_trainer

    outside = _outside(tmp_path)
    out_dir = ci_settings.warehouse.root / "models" / "planted" / "foundation"
    for sub in ("logs", "checkpoints"):
        _plant(out_dir / sub, outside.parent)
    build_trainer(ci_settings.train, out_dir, 4, has_val=False, progress=False, patience=0)
    assert not (out_dir / "logs").is_symlink() and not (out_dir / "checkpoints").is_symlink()
    assert sorted(p.name for p in outside.parent.iterdir()) == [outside.name] and outside.read_bytes() == PRECIOUS
    linked = ci_settings.warehouse.root / "models" / "linked"
    _plant(linked, outside.parent)
    with pytest.raises(ValueError, match=f"^{linked} is a symbolic link to {outside.parent}, outside the warehouse"):
        build_trainer(ci_settings.train, linked / "foundation", 4, has_val=False, progress=False, patience=0)
