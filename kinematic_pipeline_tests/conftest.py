"""Shared fixtures and helpers: settings pointing at a temporary warehouse, short synthetic ranges, and a
warehouse tokenized from a synthetic Parquet file (what the tokenize, evaluate and lineage tests build on), built
once per run (``tokenized_once``) and copied per module (``copy_warehouse``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import SyntheticConfig, load_settings
from kinematic_pipeline.folds import Fold
from kinematic_pipeline.sources.synthetic import SyntheticSource
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens


def cli(name: str) -> str:
    """A console script of the environment running the tests (``dagster``, ``dagster-webserver``, ...):
    beside ``sys.executable``, whatever virtual environment that is."""
    return str(Path(sys.executable).with_name(name))


def dagster_materialize(*args: str) -> list[str]:
    """``dagster asset materialize -m kinematic_pipeline ARGS`` (the real Dagster CLI) with the run's steps in the
    run's own process: Dagster's ``in_process`` executor, chosen by run config. A refusal is raised and printed the
    same by either executor, and the multiprocess executor's step subprocess costs a second import of everything:
    one cheap asset took 18.2 s through the CLI with it and 9.3 s without (2026-12-02). The tests of processes
    (killed runs, parallel backfills, the cluster) and the DAG lane's group materializations keep the default."""
    in_process = ("--config-json", '{"execution": {"config": {"in_process": {}}}}')
    return [cli("dagster"), "asset", "materialize", "-m", "kinematic_pipeline", *in_process, *args]


SHORT_START, SHORT_END = dt.date(2021, 3, 1), dt.date(2021, 4, 30)


def golden_ci_settings():
    """The ci warehouse ``.ci/run`` materialized whole (``KP_GOLDEN_WAREHOUSE``): skip without it, fail under CI."""
    import os

    path = os.environ.get("KP_GOLDEN_WAREHOUSE")
    if not path:
        if os.environ.get("CI"):
            pytest.fail("KP_GOLDEN_WAREHOUSE is not set: .ci/run must point it at the ci warehouse it materialized")
        pytest.skip("set KP_GOLDEN_WAREHOUSE (and DAGSTER_HOME) to a ci-profile warehouse materialized whole")
    return load_settings("ci", warehouse=Path(path), env={})


@pytest.fixture
def warehouse(tmp_path):
    return tmp_path / "warehouse"


@pytest.fixture
def ci_settings(warehouse):
    """The ci profile on the synthetic source, over two months, in a temporary warehouse."""
    return single_cut(load_settings("ci", warehouse=warehouse, start_date=SHORT_START, end_date=SHORT_END, env={}))


# --- a tokenized warehouse from a synthetic Parquet file ---------------------------------------------

START, END = dt.date(2021, 1, 4), dt.date(2021, 7, 30)
CUT = dt.date(2021, 6, 15)  # "day t" of the perturbation test, and the training cut of the corpus test


def _bars(n_tickers: int = 4) -> pl.DataFrame:
    source = SyntheticSource(
        SyntheticConfig(n_tickers=n_tickers, late_listing_fraction=0.0, zero_volume_prob=0.0), START, END
    )
    return source.read(START, END).select("ticker", "date", "open", "high", "low", "close", "volume")


def _settings(tmp_path, name: str, bars: pl.DataFrame, **tokenize):
    path = tmp_path / f"{name}.parquet"
    bars.write_parquet(path)
    settings = load_settings(
        "ci", source="parquet", source_path=str(path), warehouse=tmp_path / name, start_date=START, end_date=END, env={}
    )
    settings = _single_cut_at_cut(settings)
    return dataclasses.replace(settings, tokenize=dataclasses.replace(settings.tokenize, **tokenize))


def _single_cut_at_cut(settings):
    return dataclasses.replace(settings, split=dataclasses.replace(settings.split, folds=1, train_end=CUT))


def _tokenized_fold() -> Fold:
    """The one fold of ``tokenized_once`` (the single cut ``CUT``), known before it is built: what the policies that
    modules name at import train and test on. Folds depend on the split and the start date, never on the warehouse
    (this one is never created)."""
    unused = Path(tempfile.gettempdir()) / "kp-tokenized-fold-only"
    (fold,) = _single_cut_at_cut(load_settings("ci", warehouse=unused, start_date=START, end_date=END, env={})).folds
    return fold


TOKENIZED_FOLD = _tokenized_fold()
CI_FOLDS = load_settings(
    "ci", warehouse=Path(tempfile.gettempdir()) / "kp-ci-folds-only", env={}
).folds  # the profile's


def single_cut(settings):
    """``settings`` with one fold (the single cut ``split.train_end``): the ci profile's two walk-forward folds
    need a year of history; these tests' few months test the single cut."""
    return dataclasses.replace(settings, split=dataclasses.replace(settings.split, folds=1))


def _run_all(settings) -> list[dt.date]:
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    token_days = [d for d in days if settings.warehouse.shard("spline_tokens", d).exists()]
    materialize_labels(settings, token_days, progress=False)
    return token_days


def _training_inputs(settings) -> None:
    """What training reads beside the shards: the three window stores (the cut's windows), their corpus_stats."""
    from kinematic_pipeline.stages.corpus import materialize_corpus_stats
    from kinematic_pipeline.stages.window_store import materialize_window_store
    from kinematic_pipeline.tokenizations import TOKENIZATIONS

    for tok in TOKENIZATIONS.values():
        materialize_window_store(settings, tok, progress=False)
    materialize_corpus_stats(settings)


@pytest.fixture(scope="session")
def tokenized_once(tmp_path_factory):
    """``_bars()`` tokenized once per test run at tau 1% over the single cut: raw bars, the three token kinds,
    labels, the window stores and corpus_stats (``_run_all`` and ``_training_inputs``). Never written to: a test
    takes a copy (``copy_warehouse``)."""
    settings = _settings(tmp_path_factory.mktemp("tokenized"), "wh", _bars(), taus=(0.01,))
    _run_all(settings)
    _training_inputs(settings)
    return settings


def copy_warehouse(settings, folder: Path):
    """``settings`` over a copy of its warehouse and of its source file, in ``folder``. A copy is a warehouse of its
    own: the catalog's views and the manifests hold paths relative to the warehouse, and ``copy2`` keeps the mtimes
    the verified-read sidecars recorded."""
    folder.mkdir(parents=True, exist_ok=True)
    root = shutil.copytree(settings.warehouse.root, folder / settings.warehouse.root.name)
    if settings.data.source_path is None:  # the embedded synthetic universe: nothing to copy
        return dataclasses.replace(settings, warehouse=root)
    source = shutil.copy2(settings.data.source_path, folder / Path(settings.data.source_path).name)
    data = dataclasses.replace(settings.data, source_path=str(source))
    return dataclasses.replace(settings, warehouse=root, data=data)


def _perturb_after(bars: pl.DataFrame, day: dt.date, seed: int = 7) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = bars.height
    price_factor = pl.Series(np.exp(rng.normal(0, 0.05, n)))
    volume_factor = pl.Series(np.exp(rng.normal(0, 0.5, n)))
    future = pl.col("date") > day
    return bars.with_columns(
        *[
            pl.when(future).then(pl.col(c) * price_factor).otherwise(pl.col(c)).alias(c)
            for c in ("open", "high", "low", "close")
        ],
        pl.when(future).then((pl.col("volume") * volume_factor).round()).otherwise(pl.col("volume")).alias("volume"),
    )


def execute_run_requests(
    defs: dg.Definitions,
    requests: Sequence[dg.RunRequest],
    instance: dg.DagsterInstance,
    run_config: dict | None = None,
) -> list[dg.ExecuteInProcessResult]:
    """Execute run requests one after another in this process, in the order the queue launches them
    (tests, benchmarks, a manual tick without the daemon); ``run_config`` is added to each request's
    own (e.g. loggers). Stops after the first failed run."""
    results = []
    for request in requests:
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=request.asset_selection,
            partition_key=request.partition_key,
            tags=request.tags,
            run_config={**(run_config or {}), **request.run_config},
            resources=defs.resources,
            instance=instance,
            raise_on_error=False,
        )
        results.append(result)
        if not result.success:
            break
    return results


def record_in_manifest(wh, asset: str, day) -> None:
    """Make ``asset``'s manifest of ``day`` record the bytes its shard holds now (a test that edits a shard as an
    older writer would have written it; a minimal manifest when there is none), so that verified reads take it."""
    from kinematic_pipeline.warehouse.atomic import file_sha256

    sha, path = file_sha256(wh.shard(asset, day)), wh.manifest(asset, day)
    if path.exists():
        frame = pl.read_parquet(path).with_columns(content_hash=pl.lit(sha))
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        frame = pl.DataFrame({"partition_date": [day], "content_hash": [sha]})
    if asset == "labels" and "inputs_digest" not in frame.columns:  # pinned to the inputs on disk now
        from kinematic_pipeline.pins import label_inputs_digest, label_sessions

        sessions = label_sessions(day, 1)  # Buy/Sell/Hold's: the next session
        frame = frame.with_columns(
            next_date=pl.lit(sessions[1]), inputs_digest=pl.lit(label_inputs_digest(wh, sessions))
        )
    frame.write_parquet(path)
