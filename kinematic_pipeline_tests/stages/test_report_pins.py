"""The report group's products (the pooled records, the verdict) are read back only while the evaluation files they
were computed from are unchanged: a policy's predictions re-materialized since is refused, naming the asset."""

from __future__ import annotations

import polars as pl
import pytest

from kinematic_pipeline.pins import StalePairError, check_evaluation, evaluation_digest, pin_evaluation
from kinematic_pipeline.warehouse import MARGIN_BACKTESTS, PREDICTIONS, Warehouse


def _evaluation_files(wh: Warehouse) -> None:
    wh.write(pl.DataFrame({"p_buy": [0.2, 0.5]}), wh.root / PREDICTIONS / "splinegpt_tau0.01_seed1.parquet")
    wh.write(pl.DataFrame({"p_buy": [0.3]}), wh.root / PREDICTIONS / "universe" / "splinegpt_tau0.01_seed1.parquet")
    wh.write(pl.DataFrame({"margin": [0.1]}), wh.root / MARGIN_BACKTESTS / "splinegpt_tau0.01_seed1.parquet")


def test_a_pooled_record_is_refused_once_a_prediction_it_was_pooled_from_changes(tmp_path):
    wh = Warehouse(tmp_path / "warehouse")
    _evaluation_files(wh)
    record = wh.pooled_dir / "inputs.json"
    with pytest.raises(FileNotFoundError, match="holds no pooled_backtests: materialize pooled_backtests"):
        check_evaluation(wh, record, "pooled_backtests")
    pin_evaluation(wh, record, evaluation_digest(wh))
    check_evaluation(wh, record, "pooled_backtests")  # unchanged: read back
    universe = wh.root / PREDICTIONS / "universe" / "splinegpt_tau0.01_seed1.parquet"
    wh.write(pl.DataFrame({"p_buy": [0.31]}), universe)  # one universe prediction re-made
    with pytest.raises(StalePairError, match="computed from other predictions .* re-materialize pooled_backtests"):
        check_evaluation(wh, record, "pooled_backtests")
    wh.write(pl.DataFrame({"p_buy": [0.3]}), universe)  # the same bytes again: it holds again
    check_evaluation(wh, record, "pooled_backtests")
    (wh.root / MARGIN_BACKTESTS / "splinegpt_tau0.01_seed2.parquet").write_bytes(
        (wh.root / MARGIN_BACKTESTS / "splinegpt_tau0.01_seed1.parquet").read_bytes()
    )  # a new policy's margin backtests: the set pooled from is not the set on disk
    with pytest.raises(StalePairError):
        check_evaluation(wh, record, "pooled_backtests")


def test_the_verdict_refuses_stale_pooled_records_instead_of_tabling_the_error(tmp_path, monkeypatch):
    """A verdict that cannot be computed is one row saying why; stale inputs are no such reason: refused, and no
    verdict file is written."""
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.stages import verdict

    settings = load_settings("ci", warehouse=tmp_path / "warehouse")

    def stale(_settings):
        raise StalePairError(
            "pooled_backtests ... was computed from other predictions: re-materialize pooled_backtests"
        )

    monkeypatch.setattr(verdict, "compute_verdict", stale)
    with pytest.raises(StalePairError, match="re-materialize pooled_backtests"):
        verdict.materialize_verdict(settings)
    assert not (settings.warehouse.report_tables_dir / "verdict.parquet").exists()

    def not_computable(_settings):
        raise ValueError("the verdict needs Buy & Hold and at least one strategy on common days")

    monkeypatch.setattr(verdict, "compute_verdict", not_computable)
    table = verdict.materialize_verdict(settings)
    assert table["Answer"].to_list() == [
        "not computable: the verdict needs Buy & Hold and at least one strategy on common days"
    ]
    verdict.read_verdict(settings)  # written with its pin: read back
