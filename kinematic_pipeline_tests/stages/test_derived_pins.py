"""Every derived artefact is read only beside the inputs it was made from (issue 40, item 3), each case first the
failure it was, then the refusal or the right result:

- a restated bar (a corrected close re-ingested, its tokens and labels rebuilt): the features files, and so the
  rules' and probes' predictions, refuse until the features are re-materialized;
- predictions re-materialized alone: the backtests' views (the per-fold tables, a single fold's record, lineage's)
  refuse the backtests swept from the old predictions;
- a report from stale tables: ``report`` refuses, naming ``paper_tables``; a report over predictions whose model was
  replaced since they were made (the tables' pin still holds): ``report`` refuses, naming the model file and the
  predictions to re-make, as ``paper_tables`` does;
- a dropped seed (``KP_SEEDS=1234`` after a two-seed run): neither pooled nor in the universe reads, records pooled
  for the other grid refused, and ``lineage`` traces the run's seed (or says that none matches) instead of crashing;
- universes drawn under two membership files: refused, naming both.

On the tokenized warehouse of ``conftest`` (single cut, tau 1%), with the momentum rules (no training): their
real predictions and backtests; the seeded policies are the rule's files relabelled as splinegpt's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import polars as pl
import pytest

from kinematic_pipeline import cli
from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.lineage import pooled_record
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.stages.backtests import EVALUATION_SCHEMAS, materialize_backtests
from kinematic_pipeline.stages.evidence import universe_predictions
from kinematic_pipeline.stages.features import materialize_features, read_features
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.pooled import (
    PAPER_BACKTESTS,
    materialize_pooled_backtests,
    read_pooled,
    read_view,
)
from kinematic_pipeline.stages.predict import materialize_predictions
from kinematic_pipeline.stages.report import materialize_report
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.tokenizations import RAW
from kinematic_pipeline.warehouse import (
    BACKTESTS,
    EQUITY_CURVES,
    MARGIN_BACKTESTS,
    PREDICTIONS,
    PROVENANCE,
    RAW_OHLCV,
    TRADES,
)
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.conftest import CUT, END, TOKENIZED_FOLD, copy_warehouse

pytestmark = pytest.mark.slow  # the nightly lane: the fast lane keeps its 8 minutes on a slower machine

RULE, OTHER_RULE, TAU = "momentum_1d", "momentum_20d", 0.01
CODE = {"kinematic_pipeline": "test"}


def _evaluated(settings) -> None:
    materialize_features(settings, RAW, progress=False)
    for variant in (RULE, OTHER_RULE):
        policy = Policy(variant, BuySellHold(TAU), 0, TOKENIZED_FOLD)
        materialize_predictions(settings, policy)
        materialize_backtests(settings, policy, CODE)


@pytest.fixture(scope="module")
def evaluated(tokenized_once, tmp_path_factory):
    """A copy of the tokenized warehouse with both rules' predictions and backtests."""
    settings = copy_warehouse(tokenized_once, tmp_path_factory.mktemp("derived_pins"))
    _evaluated(settings)
    return settings


def _copy(settings, tmp_path):
    return copy_warehouse(settings, tmp_path)


def _with(settings, seeds=None, membership=None):
    if seeds is not None:
        settings = dataclasses.replace(settings, train=dataclasses.replace(settings.train, seeds=seeds))
    if membership is not None:
        settings = dataclasses.replace(
            settings, evaluate=dataclasses.replace(settings.evaluate, membership_file=str(membership))
        )
    return settings


def _rewrite(path, **values) -> None:
    pl.read_parquet(path).with_columns(*(pl.lit(v).alias(k) for k, v in values.items())).write_parquet(path)


# --- a restated bar ------------------------------------------------------------------------------------------


def test_a_restated_bar_refuses_the_features_and_what_trades_them_until_they_are_rebuilt(evaluated, tmp_path):
    settings = _copy(evaluated, tmp_path)
    wh = settings.warehouse
    day = [d for d in wh.shard_days(RAW_OHLCV) if d > CUT][3]  # a test day: the probes trade its close
    ticker = read_features(settings, RULE, TOKENIZED_FOLD, ("test",)).filter(pl.col("date") == day)["ticker"][0]
    before = read_features(settings, RULE, TOKENIZED_FOLD, ("test",), ("close",)).filter(
        (pl.col("date") == day) & (pl.col("ticker") == ticker)
    )["close"][0]
    # the source corrects the close of one bar; it is re-ingested, its tokens and labels rebuilt from there on
    source = pl.read_parquet(settings.data.source_path)
    bar = (pl.col("date") == day) & (pl.col("ticker") == ticker)
    corrected = source.with_columns(pl.when(bar).then(pl.col("close") * 1.01).otherwise(pl.col("close")).alias("close"))
    corrected.with_columns(pl.max_horizontal("high", "close").alias("high")).write_parquet(settings.data.source_path)
    later = trading_days(day, END)
    materialize_raw_ohlcv(settings, [day], progress=False)
    materialize_tokens(settings, later, progress=False)
    materialize_labels(settings, trading_days(day - dt.timedelta(days=7), END), progress=False)
    features = wh.features_file("raw", "test")
    with pytest.raises(StalePairError) as refused:
        read_features(settings, RULE, TOKENIZED_FOLD, ("test",))
    message = str(refused.value)
    assert "\n" not in message and str(features) in message and "re-materialize raw_features" in message
    assert f"shard of {day}" in message
    with pytest.raises(StalePairError, match="re-materialize raw_features"):
        materialize_predictions(
            settings, Policy(RULE, BuySellHold(TAU), 0, settings.folds[0])
        )  # no rule or probe trades the old bar
    materialize_features(settings, RAW, progress=False)  # the fix: the probes read the corrected bar
    now = read_features(settings, RULE, TOKENIZED_FOLD, ("test",), ("close",)).filter(
        (pl.col("date") == day) & (pl.col("ticker") == ticker)
    )["close"][0]
    assert now == pytest.approx(before * 1.01)
    materialize_predictions(
        settings, Policy(RULE, BuySellHold(TAU), 0, settings.folds[0])
    )  # and the rules and probes trade it


# --- predictions re-materialized alone ------------------------------------------------------------------------


def test_backtests_are_read_only_beside_the_predictions_they_were_swept_from(evaluated, tmp_path):
    settings = _copy(evaluated, tmp_path)
    wh = settings.warehouse
    policy = Policy(RULE, BuySellHold(TAU), 0, TOKENIZED_FOLD)
    assert read_view(settings, BACKTESTS).height and pooled_record(settings).height
    predictions = wh.evaluation_file(PREDICTIONS, policy)
    frame = pl.read_parquet(predictions)
    frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(0.9).otherwise(pl.col("p_buy")).alias("p_buy")
    ).write_parquet(predictions)  # the predictions re-made (another calibration, a new model), the backtests not
    wh.refresh_view(PREDICTIONS, EVALUATION_SCHEMAS[PREDICTIONS])
    for read in (
        lambda: read_view(settings, BACKTESTS),  # the per-fold tables' rows, a single fold's record
        lambda: read_view(settings, MARGIN_BACKTESTS),
        lambda: pooled_record(settings),  # lineage's
    ):
        with pytest.raises(StalePairError) as refused:
            read()
        message = str(refused.value)
        assert "\n" not in message and str(predictions) in message
        assert f"re-materialize {RULE}_backtests partition {policy.key}" in message
    materialize_backtests(settings, policy, CODE)  # the fix
    assert read_view(settings, BACKTESTS).height and pooled_record(settings).height


# --- a report from stale tables -------------------------------------------------------------------------------


def _placeholder_tables(settings):
    """One-cell files for every table the report reads and the tables' context, not yet pinned; their folder."""
    from kinematic_pipeline.stages.report import CONTEXT_FILE
    from kinematic_pipeline.stages.report_titles import ALL_TITLES, OPTIONAL_TABLES

    tables = settings.warehouse.report_tables_dir
    tables.mkdir(parents=True)
    for name in ALL_TITLES:
        if name not in OPTIONAL_TABLES:
            pl.DataFrame({"x": [1]}).write_parquet(tables / f"{name}.parquet")
    (tables / CONTEXT_FILE).write_text('{"profile": "ci"}')
    return tables


def test_the_report_is_never_rewritten_from_tables_older_than_the_evaluation_files(evaluated, tmp_path):
    from kinematic_pipeline.pins import evaluation_digest, pin_evaluation
    from kinematic_pipeline.run_keys import run_keys_digest
    from kinematic_pipeline.warehouse.layout import TABLES_PIN_FILE

    settings = _copy(evaluated, tmp_path)
    wh = settings.warehouse
    tables = _placeholder_tables(settings)
    with pytest.raises(FileNotFoundError, match="materialize paper_tables"):
        materialize_report(settings)  # tables without their pin: never materialized by this version
    pin_evaluation(wh, tables / TABLES_PIN_FILE, evaluation_digest(wh), run_keys_digest(settings))
    materialize_report(settings)  # as paper_tables pins them: read
    policy = Policy(RULE, BuySellHold(TAU), 0, TOKENIZED_FOLD)
    predictions = wh.evaluation_file(PREDICTIONS, policy)
    _rewrite(predictions, p_hold=0.5)  # predictions re-made, then their backtests: the tables are older
    materialize_backtests(settings, policy, CODE)
    with pytest.raises(StalePairError) as refused:
        materialize_report(settings)
    assert "\n" not in str(refused.value) and str(refused.value).endswith("re-materialize paper_tables")
    pin_evaluation(wh, tables / TABLES_PIN_FILE, evaluation_digest(wh), run_keys_digest(settings))  # rebuilt
    materialize_report(settings)
    with pytest.raises(StalePairError, match="for other policies than this run's.*re-materialize paper_tables"):
        materialize_report(_with(settings, seeds=(1234,)))  # the tables of another grid of policies


def test_the_report_refuses_while_a_model_was_replaced_since_its_predictions_were_made(evaluated, tmp_path):
    from kinematic_pipeline.pins import evaluation_digest, pin_evaluation
    from kinematic_pipeline.run_keys import run_keys_digest
    from kinematic_pipeline.stages.baselines import materialize_probe
    from kinematic_pipeline.warehouse.layout import TABLES_PIN_FILE

    settings = _copy(evaluated, tmp_path)
    wh, probe = settings.warehouse, Policy("lr_raw", BuySellHold(TAU), 0, TOKENIZED_FOLD)
    materialize_probe(settings, probe)
    materialize_predictions(settings, probe)
    materialize_backtests(settings, probe, CODE)
    tables = _placeholder_tables(settings)
    pin_evaluation(wh, tables / TABLES_PIN_FILE, evaluation_digest(wh), run_keys_digest(settings))
    materialize_report(settings)  # the tables of the evaluation files on disk, made by the models on disk
    refit = dataclasses.replace(settings.evaluate, probe_max_train_rows=50)
    materialize_probe(dataclasses.replace(settings, evaluate=refit), probe)  # the model replaced, not its predictions
    wh.report_file.write_text("the last report\n")
    with pytest.raises(StalePairError) as refused:
        materialize_report(settings)  # `materialize --select report` alone: the tables' pin still holds
    message = str(refused.value)
    assert "\n" not in message and str(wh.probe_dir(probe)) in message, message
    assert message.endswith(f"re-materialize lr_raw_predictions partition {probe.key}"), message
    assert wh.report_file.read_text() == "the last report\n"  # not rewritten
    materialize_predictions(settings, probe)  # the fix, then the backtests and tables after it
    materialize_backtests(settings, probe, CODE)
    with pytest.raises(StalePairError, match="re-materialize paper_tables"):
        materialize_report(settings)
    pin_evaluation(wh, tables / TABLES_PIN_FILE, evaluation_digest(wh), run_keys_digest(settings))
    materialize_report(settings)
    assert wh.report_file.read_text() != "the last report\n"


# --- a dropped seed -------------------------------------------------------------------------------------------


def _as_model(settings, seed: int) -> Policy:
    """The rule's evaluation files relabelled as those of splinegpt ``seed`` (a model evaluated without training)."""
    wh, rule = settings.warehouse, Policy(RULE, BuySellHold(TAU), 0, TOKENIZED_FOLD)
    model = Policy("splinegpt", BuySellHold(TAU), seed, TOKENIZED_FOLD)
    for asset in (PREDICTIONS, BACKTESTS, EQUITY_CURVES, TRADES, MARGIN_BACKTESTS):
        frame = pl.read_parquet(wh.evaluation_file(asset, rule))
        wh.write(
            frame.with_columns(variant=pl.lit("splinegpt"), seed=pl.lit(seed, pl.Int64)),
            wh.evaluation_file(asset, model),
        )
    for extra in ("validation", "inputs", "model", "universe", "universe_raw", "calibration"):
        path = wh.predictions_extra(extra, rule)
        if path.exists():
            frame = pl.read_parquet(path)
            if "variant" in frame.columns:
                frame = frame.with_columns(variant=pl.lit("splinegpt"), seed=pl.lit(seed, pl.Int64))
            wh.write(frame, wh.predictions_extra(extra, model))
    predictions = wh.evaluation_file(PREDICTIONS, model)
    own = pl.col("link") == "predictions"
    provenance = pl.read_parquet(wh.evaluation_file(PROVENANCE, rule)).with_columns(
        variant=pl.lit("splinegpt"),
        seed=pl.lit(seed, pl.Int64),
        path=pl.when(own).then(pl.lit(str(predictions.relative_to(wh.root)))).otherwise(pl.col("path")),
        sha256=pl.when(own).then(pl.lit(file_sha256(predictions))).otherwise(pl.col("sha256")),
    )
    wh.write(provenance, wh.evaluation_file(PROVENANCE, model))
    for asset in (PREDICTIONS, BACKTESTS, EQUITY_CURVES, TRADES, MARGIN_BACKTESTS, PROVENANCE):
        wh.refresh_view(asset, EVALUATION_SCHEMAS[asset])
    return model


def _seeds(frame: pl.DataFrame) -> set[int]:
    return set(frame.filter(pl.col("variant") == "splinegpt")["seed"].to_list())


def test_a_dropped_seed_is_neither_pooled_nor_compared_nor_traced(evaluated, tmp_path, capsys):
    settings = _copy(evaluated, tmp_path)
    for seed in (1234, 1235):
        _as_model(settings, seed)
    both, one = _with(settings, seeds=(1234, 1235)), _with(settings, seeds=(1234,))
    ticker = read_view(one, BACKTESTS)["ticker"].min()
    assert _seeds(materialize_pooled_backtests(both)[PAPER_BACKTESTS]) == {1234, 1235}
    with pytest.raises(StalePairError, match="for other policies than this run's.*re-materialize pooled_backtests"):
        read_pooled(one, PAPER_BACKTESTS)  # pooled for the two-seed run: not this run's record
    assert _seeds(materialize_pooled_backtests(one)[PAPER_BACKTESTS]) == {1234}
    assert _seeds(read_pooled(one, PAPER_BACKTESTS)) == {1234}
    assert _seeds(read_view(one, BACKTESTS)) == _seeds(read_view(one, PREDICTIONS)) == {1234}
    assert _seeds(universe_predictions(one, ("splinegpt", RULE))) == {1234}
    capsys.readouterr()
    cli.lineage(one, "splinegpt", TAU, ticker, None)  # the rule's files carry no adapter: its pair is reported
    out = capsys.readouterr().out
    assert "seed 1234: pooled" in out and "seed 1235" not in out and "1 fold(s) x 1 seed(s)" in out
    assert cli.lineage(_with(settings, seeds=(1236,)), "splinegpt", TAU, ticker, None) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no pooled backtest of splinegpt" in err and "this run's seed(s) 1236" in err
    assert cli.lineage(one, "splinegpt", 0.02, ticker, None) == 2  # no policy of the run at that tau
    assert "no policy of this run is splinegpt at tau=0.02" in capsys.readouterr().err


# --- one universe per comparison ------------------------------------------------------------------------------


def test_universes_drawn_under_two_membership_files_are_refused_naming_both(evaluated, tmp_path):
    settings = _copy(evaluated, tmp_path)
    tickers = sorted(pl.read_parquet(settings.data.source_path)["ticker"].unique().to_list())
    every, fewer = tmp_path / "every.csv", tmp_path / "fewer.csv"
    pl.DataFrame({"Symbol": tickers, "Date added": "2000-01-03"}).write_csv(every)
    pl.DataFrame({"Symbol": tickers[:-1], "Date added": "2000-01-03"}).write_csv(fewer)
    materialize_predictions(_with(settings, membership=every), Policy(RULE, BuySellHold(TAU), 0, TOKENIZED_FOLD))
    materialize_predictions(_with(settings, membership=fewer), Policy(OTHER_RULE, BuySellHold(TAU), 0, TOKENIZED_FOLD))
    current = _with(settings, membership=every)
    with pytest.raises(StalePairError) as refused:
        universe_predictions(current, (RULE, OTHER_RULE))
    message = str(refused.value)
    assert "\n" not in message and str(every) in message and str(fewer) in message
    assert file_sha256(every)[:16] in message and file_sha256(fewer)[:16] in message
    assert (
        f"re-materialize {OTHER_RULE}_predictions partition {Policy(OTHER_RULE, BuySellHold(TAU), 0, TOKENIZED_FOLD).key}"
        in message
    )
    materialize_predictions(
        current, Policy(OTHER_RULE, BuySellHold(TAU), 0, current.folds[0])
    )  # the fix: one membership file
    universe = universe_predictions(current, (RULE, OTHER_RULE))
    assert set(universe["ticker"].unique().to_list()) == set(tickers)
    assert "membership_sha256" not in universe.columns


def test_a_membership_file_set_after_the_universes_were_drawn_is_refused_until_they_are_drawn_again(
    evaluated, tmp_path
):
    settings = _copy(evaluated, tmp_path)
    tickers = sorted(pl.read_parquet(settings.data.source_path)["ticker"].unique().to_list())
    fewer = tmp_path / "fewer.csv"
    pl.DataFrame({"Symbol": tickers[:-1], "Date added": "2000-01-03"}).write_csv(fewer)
    policies = [Policy(rule, BuySellHold(TAU), 0, TOKENIZED_FOLD) for rule in (RULE, OTHER_RULE)]
    for policy in policies:
        materialize_predictions(settings, policy)  # drawn under no membership file
    filtered = _with(settings, membership=fewer)  # then the setting names one
    with pytest.raises(StalePairError) as refused:
        universe_predictions(filtered, (RULE, OTHER_RULE))
    message = str(refused.value)
    assert "\n" not in message and "drawn under membership file (none)" in message
    assert str(fewer) in message and file_sha256(fewer)[:16] in message and "re-materialize" in message
    for policy in policies:  # the fix: both drawn again under the file
        materialize_predictions(filtered, policy)
    universe = universe_predictions(filtered, (RULE, OTHER_RULE))
    assert tickers[-1] not in set(universe["ticker"].unique().to_list())
    with pytest.raises(StalePairError, match=r"the settings name \(none\)"):  # and the file removed again
        universe_predictions(settings, (RULE, OTHER_RULE))
