"""Dagster glue: the definitions load, every job resolves, and assets materialize in-process."""

from __future__ import annotations

import dataclasses
import pkgutil
import subprocess
import sys

import dagster as dg
import polars as pl
import pytest

from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline.orchestration.partitions import range_tags
from kinematic_pipeline.warehouse.catalog import query
from kinematic_pipeline_tests.conftest import SHORT_END, SHORT_START

# The Dagster glue; every other module of the package is pure library code and must not import dagster.
DAGSTER_GLUE = (
    "kinematic_pipeline.orchestration",
    "kinematic_pipeline.definitions",
    "kinematic_pipeline.cli",
    "kinematic_pipeline.__main__",
)


def pure_modules() -> list[str]:
    import kinematic_pipeline

    found = pkgutil.walk_packages(kinematic_pipeline.__path__, "kinematic_pipeline.")
    return sorted(m.name for m in found if not m.name.startswith(DAGSTER_GLUE))


def test_definitions_load_and_every_job_resolves(ci_settings):
    defs = build_definitions(ci_settings)
    dg.Definitions.validate_loadable(defs)  # what `dagster definitions validate` checks (partition mappings, ...)
    jobs = defs.resolve_all_job_defs()
    assert {j.name for j in jobs} >= {"ingest_job", "tokenize_job", "corpus_job"}
    for job in jobs:
        assert job.asset_layer.executable_asset_keys, job.name  # every job selects something it can run
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey("raw_ohlcv") in graph.get_all_asset_keys()
    keys = graph.get(dg.AssetKey("raw_ohlcv")).partitions_def.get_partition_keys()
    assert "2021-03-01" in keys and "2021-01-18" not in keys  # MLK day is excluded


def test_the_package_module_exposes_the_definitions_lazily():
    import kinematic_pipeline

    assert "defs" in dir(kinematic_pipeline)
    assert isinstance(kinematic_pipeline.defs, dg.Definitions)


@pytest.mark.slow
def test_pure_modules_never_import_dagster():
    modules = pure_modules()
    assert "kinematic_pipeline.stages.predict" in modules and len(modules) > 30
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + "print('dagster' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_raw_ohlcv_materializes_in_process_over_a_range_of_days(ci_settings):
    defs = build_definitions(ci_settings)
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=["raw_ohlcv"],
        resources=defs.resources,
        tags=range_tags(SHORT_START, "2021-03-31"),
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    mats = result.asset_materializations_for_node("raw_ohlcv")
    assert len(mats) == 23  # one per session in March 2021
    meta = mats[0].metadata
    assert meta["rows_read"].value == meta["rows_kept"].value + meta["rows_quarantined"].value
    assert len(meta["content_hash"].value) == 64
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 6 and all(c.passed for c in checks)  # the contract (4) and the quality warnings (2)
    days = query(ci_settings.warehouse, "SELECT DISTINCT date FROM raw_ohlcv ORDER BY 1")["date"]
    assert days.len() == 23 and days.max() <= SHORT_END
    assert isinstance(days, pl.Series)


@pytest.mark.slow  # 34 s: the nightly lane runs it (the fast lane's 8 minutes include the install)
def test_the_tokenize_and_corpus_stages_materialize_in_process(tmp_path):
    from kinematic_pipeline.config import load_settings

    settings = load_settings("ci", warehouse=tmp_path / "wh", env={})
    defs = build_definitions(settings)
    resources = defs.resources
    instance = dg.DagsterInstance.ephemeral()
    span = range_tags("2021-01-04", "2021-06-30")
    everything = [*defs.assets, *defs.asset_checks]
    steps = [
        (["raw_ohlcv"], span),
        (["alpha_estimates"], {}),
        (["spline_tokens", "fd_tokens", "raw_tokens", "labels"], span),
        (["spline_window_store", "fd_window_store", "raw_window_store"], {}),
        (["spline_corpus_stats", "fd_corpus_stats", "raw_corpus_stats"], {}),
    ]
    for selection, tags in steps:
        result = dg.materialize(everything, selection=selection, resources=resources, tags=tags, instance=instance)
        assert result.success, selection
    spline = instance.get_latest_materialization_event(dg.AssetKey("spline_tokens")).asset_materialization
    assert (
        spline.metadata["windows"].value == query(settings.warehouse, "SELECT count(*) FROM spline_tokens").item() > 0
    )
    stats = instance.get_latest_materialization_event(dg.AssetKey("fd_corpus_stats")).asset_materialization
    # one row set per walk-forward fold (ci: 2022H1, 2022H2), each on the days it has before its own cut
    assert stats.metadata["fit_window"].value == (
        "fold 2022H1: 2021-01-04 .. 2021-06-30; fold 2022H2: 2021-01-04 .. 2021-06-30"
    )
    assert query(settings.warehouse, "SELECT count(DISTINCT tokenization) FROM corpus_stats").item() == 3


def _upstream(graph, key: dg.AssetKey) -> set[str]:
    seen, todo = set(), [key]
    while todo:
        for parent in graph.get(todo.pop()).parent_keys:
            if parent.to_user_string() not in seen:
                seen.add(parent.to_user_string())
                todo.append(parent)
    return seen


def test_each_variants_results_have_exactly_that_variants_chain_upstream(ci_settings):
    """The UI's lineage of a Sharpe equals the variant's own chain: its adapter, foundation, window store, token
    asset (and that tokenization's statistics when it normalizes), labels (built from spline tokens), raw bars."""
    from kinematic_pipeline.variants import variant as lookup_variant

    graph = build_definitions(ci_settings).resolve_asset_graph()
    shared = {"raw_ohlcv", "alpha_estimates", "labels", "spline_tokens"}  # labels read the spline end positions
    for name in ci_settings.train.variants:
        spec = lookup_variant(name)
        tokenization = spec.tokenization.name
        own = {f"{name}_adapter", f"{name}_foundation", f"{tokenization}_tokens", f"{tokenization}_window_store"}
        own |= {f"{tokenization}_corpus_stats"} if spec.normalized else set()
        predictions = own | shared
        assert _upstream(graph, dg.AssetKey(f"{name}_predictions")) == predictions, name
        for result in ("backtests", "margin_backtests"):
            assert _upstream(graph, dg.AssetKey(f"{name}_{result}")) == predictions | {f"{name}_predictions"}, name
    # only the report group reads across variants, and it declares every variant's results
    tables = _upstream(graph, dg.AssetKey("paper_tables"))
    for name in ci_settings.train.variants:
        assert {f"{name}_backtests", f"{name}_margin_backtests", f"{name}_predictions"} <= tables


def test_each_baselines_results_have_its_features_and_probe_upstream_and_no_model(ci_settings):
    """A probe's backtests read its probe, its tokenization's features and what they were built from; a rule's
    the raw tokens' features; none reads a model. The report declares every baseline's results."""
    graph = build_definitions(ci_settings).resolve_asset_graph()
    features_inputs = {"raw_ohlcv", "alpha_estimates", "labels", "spline_tokens"}
    for name, tokenization in (("lr_spline", "spline"), ("lightgbm_fd", "fd"), ("lr_trivial", "raw")):
        chain = {f"{name}_probe", f"{tokenization}_features", f"{tokenization}_window_store", f"{tokenization}_tokens"}
        assert _upstream(graph, dg.AssetKey(f"{name}_predictions")) == chain | features_inputs, name
        assert _upstream(graph, dg.AssetKey(f"{name}_backtests")) == chain | features_inputs | {f"{name}_predictions"}
    rule = {"raw_features", "raw_window_store", "raw_tokens"} | features_inputs
    assert _upstream(graph, dg.AssetKey("momentum_20d_predictions")) == rule
    # fitted at the report's tau (ci's evaluate.baseline_taus, as demo's and real's); None: at every tau
    assert ci_settings.evaluate.baseline_taus == (0.01,)
    assert graph.get(dg.AssetKey("lr_spline_probe")).partitions_def.get_partition_keys() == ["0|0.01"]
    every = dataclasses.replace(ci_settings.evaluate, baseline_taus=None)
    swept = build_definitions(dataclasses.replace(ci_settings, evaluate=every)).resolve_asset_graph()
    assert swept.get(dg.AssetKey("lr_spline_probe")).partitions_def.get_partition_keys() == [
        f"0|{t}" for t in ("0.0025", "0.005", "0.01", "0.02")
    ]
    tables = _upstream(graph, dg.AssetKey("paper_tables"))
    for name in ci_settings.evaluate.baselines:
        assert {f"{name}_backtests", f"{name}_margin_backtests", f"{name}_predictions"} <= tables


def test_a_selection_below_one_adapter_materializes_no_other_variants_assets(ci_settings):
    from kinematic_pipeline.orchestration.plan import plan_runs

    defs = build_definitions(ci_settings)
    chosen = {k.to_user_string() for run in plan_runs(defs, "key:splinegpt_adapter+") for k in run}
    assert chosen == {
        "splinegpt_adapter",
        "splinegpt_predictions",
        "splinegpt_backtests",
        "splinegpt_margin_backtests",
        "pooled_backtests",
        "verdict",
        "paper_tables",
        "figures",
        "report",
    }


def test_the_policy_partitions_are_exactly_the_runs_grid(tmp_path):
    """The ci profile's folds (2022H1, 2022H2) with the tau sweep on the last fold and the first seed: the adapters'
    partitions are the report tau on every fold and seed and every tau on the last fold with seed 1234, each reading
    the foundation of its own fit; no partition names a policy the run never trains."""
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.policy import Policy
    from kinematic_pipeline.run_keys import policy_keys
    from kinematic_pipeline.tasks.buy_sell_hold import tau_key

    settings = load_settings("ci", warehouse=tmp_path / "wh", env={})
    assert (settings.split.tau_sweep_folds, settings.split.tau_sweep_seeds) == ("last", "first")
    assert [f.name for f in settings.folds] == ["2022H1", "2022H2"]
    graph = build_definitions(settings).resolve_asset_graph()
    seeds, taus = settings.train.seeds, settings.tokenize.taus
    report = tau_key(settings.evaluate.report_tau)
    expected = [f"2022H1@{s}|{report}" for s in seeds] + [
        f"2022H2@{s}|{tau_key(t)}" for s in seeds for t in taus if s == seeds[0] or tau_key(t) == report
    ]
    for asset in ("splinegpt_adapter", "splinegpt_predictions", "patchtst_backtests"):
        assert graph.get(dg.AssetKey(asset)).partitions_def.get_partition_keys() == expected, asset
    assert len(expected) == 2 * len(seeds) + len(taus) - 1 < len(seeds) * (1 + len(taus))
    # the sweep with every seed: the last fold's every tau for each seed
    every = dataclasses.replace(settings, split=dataclasses.replace(settings.split, tau_sweep_seeds="all"))
    all_seeds = [f"2022H1@{s}|{report}" for s in seeds] + [f"2022H2@{s}|{tau_key(t)}" for s in seeds for t in taus]
    assert policy_keys(every, "splinegpt") == all_seeds
    assert set(expected) < set(all_seeds)
    # no sweep (real's whole-DAG run): the report's tau on every fold and seed, nothing else; KP_TAU_SWEEP_FOLDS
    # sets it, and refuses what is not a choice
    none = load_settings("ci", warehouse=tmp_path / "wh", env={"KP_TAU_SWEEP_FOLDS": "none"})
    assert policy_keys(none, "splinegpt") == [f"{f}@{s}|{report}" for f in ("2022H1", "2022H2") for s in seeds]
    with pytest.raises(ValueError, match="KP_TAU_SWEEP_FOLDS='some': expected one of all, last, none"):
        load_settings("ci", warehouse=tmp_path / "wh", env={"KP_TAU_SWEEP_FOLDS": "some"})
    adapter, foundation = dg.AssetKey("splinegpt_adapter"), dg.AssetKey("splinegpt_foundation")
    for key in expected:  # a policy's adapter reads the foundation partition of its fit, and only that
        policy = Policy.from_key("splinegpt", key, settings.folds, settings.tasks)
        assert policy.key == key
        parents = graph.get_parent_partition_keys_for_child(key, foundation, adapter)
        assert list(parents.partitions_subset.get_partition_keys()) == [policy.fit_key], key
    for fit in graph.get(foundation).partitions_def.get_partition_keys():  # and a foundation feeds its policies
        children = graph.get_child_partition_keys_of_parent(fit, foundation, adapter)
        assert sorted(children) == sorted(k for k in expected if k.startswith(f"{fit}|")), fit
