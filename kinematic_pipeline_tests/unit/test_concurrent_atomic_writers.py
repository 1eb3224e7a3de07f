"""Two writers of one file at once (every variant's backtests write their fold's Buy & Hold file): neither removes
the other's temporary file mid-write as one a killed writer left. A live writer holds a lock on its temporary file;
one that no process holds is a killed writer's, and the next write removes it. CI's dag lane failed on this race:
``FileNotFoundError: .../backtests/.buy_and_hold_fold2022H1.parquet.<random>.tmp``."""

from __future__ import annotations

from pathlib import Path

from kinematic_pipeline.warehouse.atomic import _write_atomic, write_bytes_atomic


def test_a_second_writer_leaves_the_first_writers_temporary_file_alone(tmp_path):
    path = tmp_path / "backtests" / "buy_and_hold_fold2022H1.parquet"
    seen = {}

    def first(tmp):
        Path(tmp).write_bytes(b"first" * 100)
        write_bytes_atomic(path, b"second")  # the other writer, while the first is between its write and rename
        seen["kept"] = Path(tmp).exists()

    _write_atomic(path, first, durable=False)
    assert seen["kept"] and path.read_bytes() == b"first" * 100  # the last rename wins, whole


def test_a_temporary_file_no_writer_holds_is_removed_by_the_next_write(tmp_path):
    path = tmp_path / "x.parquet"
    left = tmp_path / ".x.parquet.abc123.tmp"  # what a writer killed mid-write leaves
    left.write_bytes(b"partial")
    write_bytes_atomic(path, b"whole")
    assert not left.exists() and path.read_bytes() == b"whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet"]
