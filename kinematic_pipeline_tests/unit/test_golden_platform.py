"""The golden ci numbers are kept per platform where a platform trains other floats (``golden_ci.golden_path``)."""

from __future__ import annotations

import re

from kinematic_pipeline_tests import golden_ci


def test_a_platform_is_compared_with_its_own_golden_file_when_it_has_one_else_the_default(tmp_path, monkeypatch):
    monkeypatch.setattr(golden_ci, "GOLDEN_DIR", tmp_path)
    monkeypatch.setattr(golden_ci, "GOLDEN", tmp_path / "ci_backtests.csv")
    assert golden_ci.golden_path("AuthenticAMD-AVX512") == tmp_path / "ci_backtests.csv"
    (tmp_path / "ci_backtests.AuthenticAMD-AVX512.csv").write_text("fold\n")
    assert golden_ci.golden_path("AuthenticAMD-AVX512") == tmp_path / "ci_backtests.AuthenticAMD-AVX512.csv"
    assert golden_ci.golden_path("GenuineIntel-AVX512") == tmp_path / "ci_backtests.csv"
    assert re.fullmatch(r"[\w.]+-[A-Z0-9_]+", golden_ci.platform_key()), golden_ci.platform_key()


def test_every_golden_file_names_a_platform_and_holds_the_same_rows():
    """The platforms' files differ in numbers, never in which backtests they hold."""
    import polars as pl

    files = sorted(golden_ci.GOLDEN_DIR.glob("ci_backtests*.csv"))
    assert golden_ci.GOLDEN in files
    keys = {f: pl.read_csv(f, columns=golden_ci.KEYS).sort(golden_ci.KEYS, nulls_last=True) for f in files}
    for f, frame in keys.items():
        assert f == golden_ci.GOLDEN or re.fullmatch(r"ci_backtests\.[\w.]+-[A-Z0-9_]+\.csv", f.name), f.name
        assert frame.equals(keys[golden_ci.GOLDEN]), f.name
