"""From a backtest row back to the files it came from: every link resolves, and tampering is caught."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import polars as pl
import pytest

from kinematic_pipeline.lineage import trace
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.stages.backtests import materialize_backtests
from kinematic_pipeline.stages.pooled import materialize_pooled_backtests
from kinematic_pipeline.stages.predict import materialize_predictions
from kinematic_pipeline.stages.report import materialize_paper_tables, materialize_report
from kinematic_pipeline.stages.verdict import materialize_verdict
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.training.run import finetune, pretrain
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.catalog import query
from kinematic_pipeline.warehouse.layout import VALIDATION_PREDICTIONS
from kinematic_pipeline_tests.conftest import TOKENIZED_FOLD, copy_warehouse, record_in_manifest

# slow: the module trains a foundation and an adapter and runs the whole evaluation on them (about a minute of the
# fast lane); the nightly lane runs it, and the DAG lane traces lineage on the ci warehouse itself
pytestmark = pytest.mark.slow

POLICY = Policy("splinegpt", BuySellHold(0.01), 1234, TOKENIZED_FOLD)


@pytest.fixture(scope="module")
def backtested(tokenized_once, tmp_path_factory):
    settings = copy_warehouse(tokenized_once, tmp_path_factory.mktemp("lineage"))
    pretrain(settings, POLICY, progress=False)
    finetune(settings, POLICY, progress=False)
    materialize_predictions(settings, POLICY)
    materialize_backtests(settings, POLICY, {"kinematic_pipeline": "test"})
    return settings


def test_every_link_of_a_backtest_resolves_to_a_file_with_the_recorded_hash(backtested):
    settings = backtested
    ticker = query(settings.warehouse, "SELECT min(ticker) AS t FROM backtests")["t"][0]
    report = trace(settings, POLICY, ticker)
    assert report.ok, report.problems
    prov = query(settings.warehouse, "SELECT * FROM provenance")
    links = set(prov["link"].to_list())
    assert {
        "backtests",
        "predictions",
        "adapter",
        "foundation",
        "training_shard",
        "test_shard",
        "raw_ohlcv",
        "code",
    } <= links
    files = prov.filter(pl.col("link") != "code")
    assert report.checked == files.height
    for path, sha in files.select("path", "sha256").iter_rows():  # independently of trace()
        assert not Path(path).is_absolute(), path  # relative to the warehouse: a copy checks its own files
        assert file_sha256(settings.warehouse.root / path) == sha, path
    # the training shards are exactly those on or before the cut, and the test shards exactly after it
    train = files.filter(pl.col("link") == "training_shard")
    test = files.filter(pl.col("link") == "test_shard")
    assert train["date"].max() <= str(settings.split.train_end) < test["date"].min()
    assert set(train["split"].unique().to_list()) == {
        "pretrain_train",
        "pretrain_val",
        "finetune_train",
        "finetune_val",
    }


def test_a_rewritten_training_shard_or_a_missing_raw_partition_breaks_the_chain(backtested, tmp_path):
    settings = backtested
    ticker = query(settings.warehouse, "SELECT min(ticker) AS t FROM backtests")["t"][0]
    prov = query(settings.warehouse, "SELECT * FROM provenance")
    shard = str(settings.warehouse.root / prov.filter(pl.col("link") == "training_shard")["path"][0])
    raw = str(settings.warehouse.root / prov.filter(pl.col("link") == "raw_ohlcv")["path"][-1])
    saved_shard, saved_raw = tmp_path / "shard", tmp_path / "raw"
    saved_shard.write_bytes(open(shard, "rb").read())
    saved_raw.write_bytes(open(raw, "rb").read())
    try:
        pl.read_parquet(shard).head(1).write_parquet(shard)  # re-tokenized / overwritten since training
        import os

        os.remove(raw)
        report = trace(settings, POLICY, ticker)
        assert not report.ok
        assert any("hash mismatch" in p and shard in p for p in report.problems), report.problems
        assert any("missing" in p and raw in p for p in report.problems), report.problems
    finally:
        with open(shard, "wb") as fh:
            fh.write(saved_shard.read_bytes())
        with open(raw, "wb") as fh:
            fh.write(saved_raw.read_bytes())
    assert trace(settings, POLICY, ticker).ok


def test_lineage_in_a_copied_warehouse_checks_the_copy(backtested, tmp_path):
    import dataclasses
    import shutil

    settings = backtested
    ticker = query(settings.warehouse, "SELECT min(ticker) AS t FROM backtests")["t"][0]
    copy = dataclasses.replace(settings, warehouse=tmp_path / "copy")
    shutil.copytree(settings.warehouse.root, copy.warehouse.root, symlinks=True)
    assert trace(copy, POLICY, ticker).ok
    prov = query(copy.warehouse, "SELECT * FROM provenance")
    shard = copy.warehouse.root / prov.filter(pl.col("link") == "training_shard")["path"][0]
    pl.read_parquet(shard).head(1).write_parquet(shard)  # the copy's file changes, the original's does not
    report = trace(copy, POLICY, ticker)
    assert not report.ok and any(str(shard) in p for p in report.problems), report.problems
    assert trace(settings, POLICY, ticker).ok


def test_lineage_of_an_unknown_backtest_lists_what_exists(backtested):
    with pytest.raises(LookupError, match="available: splinegpt/0.01/"):
        trace(backtested, POLICY, "NOPE")


def test_buy_and_hold_is_written_once_per_ticker_and_cost_and_never_in_a_policy_shard(backtested):
    wh = backtested.warehouse
    policy = pl.read_parquet(wh.evaluation_file("backtests", POLICY))
    bench = pl.read_parquet(wh.benchmark_file("backtests"))
    assert policy.height > 0 and (policy["variant"] == "splinegpt").all()
    assert (bench["variant"] == "buy_and_hold").all()
    costs = len(backtested.evaluate.backtest.costs_bps)
    assert bench.height == policy["ticker"].n_unique() * costs
    view = query(backtested.warehouse, "SELECT count(*) AS n FROM backtests WHERE variant = 'buy_and_hold'")
    assert view["n"][0] == bench.height
    assert "ticker" not in query(backtested.warehouse, "SELECT * FROM provenance LIMIT 1").columns


def test_the_report_states_the_tax_rate_the_backtests_used(backtested, tmp_path):
    settings = dataclasses.replace(
        backtested,
        warehouse=tmp_path / "wh",
        evaluate=dataclasses.replace(
            backtested.evaluate,
            backtest=dataclasses.replace(backtested.evaluate.backtest, tax_rate=0.25, bootstrap_resamples=50),
        ),
    )
    shutil.copytree(backtested.warehouse, settings.warehouse)
    materialize_backtests(settings, POLICY, {"kinematic_pipeline": "test"})
    materialize_pooled_backtests(settings)  # the report group in its order
    materialize_verdict(settings)
    materialize_paper_tables(settings)
    text = materialize_report(settings).read_text()
    assert "we pay 25% of that year's net realized gains" in text
    assert "32%" not in text
    assert "(20-day blocks, 50 resamples" in text


def _margin_of(settings) -> float:
    return pl.read_parquet(settings.warehouse.evaluation_file("margin_backtests", POLICY))["margin"].unique().item()


def test_the_second_rules_margin_depends_on_validation_days_only(backtested, tmp_path):
    wh = backtested.warehouse
    validation = pl.read_parquet(wh.predictions_extra(VALIDATION_PREDICTIONS, POLICY))
    predictions = wh.evaluation_file("predictions", POLICY)
    assert validation.height > 0 and validation["date"].max() <= backtested.split.train_end
    assert validation["ticker"].n_unique() == pl.read_parquet(predictions)["ticker"].n_unique()
    # Perturb every test-period label (the days after the cut), re-run predictions and backtests: same m.
    settings = dataclasses.replace(backtested, warehouse=tmp_path / "wh")
    shutil.copytree(backtested.warehouse, settings.warehouse)
    perturbed = settings.warehouse
    column = "label_tau_0p0100"
    for day in perturbed.shard_days("labels", after=settings.split.train_end):
        path = perturbed.shard("labels", day)
        frame = pl.read_parquet(path)
        frame.with_columns(((pl.col(column) + 1) % 3).cast(pl.Int8)).write_parquet(path)
        record_in_manifest(perturbed, "labels", day)  # a re-materialized labels day, not a damaged file
    materialize_predictions(settings, POLICY)
    materialize_backtests(settings, POLICY, {"kinematic_pipeline": "test"})
    test_labels = pl.read_parquet(perturbed.evaluation_file("predictions", POLICY))["label"]
    assert not test_labels.equals(pl.read_parquet(predictions)["label"])  # the labels did change
    assert _margin_of(settings) == _margin_of(backtested)


def test_the_evidence_tables_put_the_variant_side_by_side_and_explain_each_decision(backtested):
    from kinematic_pipeline.stages.evidence import evidence_tables
    from kinematic_pipeline.stages.report import load_metrics

    materialize_pooled_backtests(backtested)  # the report group's first asset: what the tables read
    built = evidence_tables(backtested, load_metrics(backtested))
    info = built["information"]
    # spline and close outcomes, 7 metrics and the skill beyond trailing vol20 each, the intervals and data seen
    assert info["Metric"].to_list()[0].startswith("Log-loss skill") and info.height == 2 * 8 + 2
    assert info["Metric"][-1] == "Data seen" and info["SplineGPT"][-1].startswith("fit ")
    assert info["Metric"][-2] == "Intervals" and info["SplineGPT"][-2] == (
        "95%, 7-day blocks of 31 test days (the 50-day block cut to a quarter of the days)"
    )
    assert "SplineGPT" in info.columns and all("[" in c or c == "N/A" for c in info["SplineGPT"].to_list()[:-2])
    # the universe tables: the policy's universe predictions (the test period's every ticker-day at tau 1%)
    signal = built["signal"].filter(pl.col("Model") == "SplineGPT")
    assert signal.height == 2 and signal["Seeds"].to_list() == ["1", "1"]
    assert built["label_artefact"]["Model"].to_list() == ["SplineGPT"]
    assert built["data_seen"]["Model"].to_list() == ["SplineGPT"]
    why = built["decisions"]["Why it trades or liquidates"].to_list()
    assert len(why) == 1 and len(why[0]) > 20
    rules = built["decision_rules"]
    assert rules["Model"].to_list() == ["SplineGPT"] and {
        "Sharpe (paper)",
        "Sharpe (calibrated)",
        "Sharpe (margin)",
    } <= set(rules.columns)
