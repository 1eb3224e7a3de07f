import datetime as dt
import re
from pathlib import Path

import pytest

from kinematic_pipeline.config import (
    PROFILES,
    IngestConfig,
    SplitConfig,
    TokenizeConfig,
    TrainConfig,
    load_settings,
    profile_settings,
)
from kinematic_pipeline.windows import LOOKBACK, N_KNOTS


def test_every_profile_resolves_with_its_defaults(tmp_path):
    for name in PROFILES:
        env = {"KP_SOURCE_PATH": str(tmp_path)} if profile_settings(name).data.source != "synthetic" else {}
        settings = load_settings(name, warehouse=tmp_path, env=env)
        assert settings.profile == name
        assert settings.warehouse.catalog_path == tmp_path.resolve() / "catalog.duckdb"


def test_environment_overrides_profile_and_arguments_override_environment(tmp_path):
    env = {
        "KP_PROFILE": "demo",
        "KP_SOURCE": "csv",
        "KP_SOURCE_PATH": "/data",
        "KP_WAREHOUSE": str(tmp_path),
        "KP_START_DATE": "2020-01-02",
    }
    settings = load_settings(env=env)
    assert (settings.profile, settings.data.source, settings.data.source_path) == ("demo", "csv", "/data")
    assert settings.data.start_date == dt.date(2020, 1, 2)
    assert settings.data.end_date is None  # a real source is read up to its last bar
    assert load_settings(env=env, source="synthetic").data.source == "synthetic"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"KP_PROFILE": "huge"}, "unknown profile"),
        ({"KP_SOURCE": "bloomberg"}, "KP_SOURCE='bloomberg'"),
        ({"KP_SOURCE": "parquet"}, "needs KP_SOURCE_PATH"),
        ({"KP_START_DATE": "03/01/2021"}, "KP_START_DATE"),
        ({"KP_START_DATE": "1970-01-02"}, "KP_START_DATE=1970-01-02 is outside the NYSE calendar"),
        ({"KP_END_DATE": "2999-12-31"}, "KP_END_DATE=2999-12-31 is outside the NYSE calendar"),
        ({"KP_TRAIN_END": "1900-01-02"}, "KP_TRAIN_END=1900-01-02 is outside the NYSE calendar"),
        ({"KP_START_DATE": "2022-01-03", "KP_END_DATE": "2021-01-04"}, "before start date"),
    ],
)
def test_bad_operator_input_is_named_in_the_error(env, message):
    with pytest.raises(ValueError, match=message):
        load_settings(env=env)


def test_training_deployment_settings_come_from_the_environment():
    settings = load_settings(
        "paper",
        source="synthetic",
        env={"KP_TRAIN_DEVICES": "4", "KP_TRAIN_PRECISION": "bf16-mixed", "KP_TRAIN_STRATEGY": "ddp_spawn"},
    )
    assert (settings.train.devices, settings.train.precision, settings.train.strategy) == (
        "4",
        "bf16-mixed",
        "ddp_spawn",
    )
    assert load_settings("ci", env={}).train.strategy == "auto"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: IngestConfig(hl_policy="flagged"), "ingest.hl_policy='flagged': expected one of 'quarantine', 'flag'"),
        (lambda: TokenizeConfig(alpha_mle_scope="sector"), "tokenize.alpha_mle_scope='sector': expected one of"),
        (lambda: TokenizeConfig(time_unit="calender"), "tokenize.time_unit='calender': expected one of 'session'"),
        (lambda: TokenizeConfig(label_source="open"), "tokenize.label_source='open': expected one of 'spline'"),
        (lambda: TokenizeConfig(alpha_price="MLE"), "tokenize.alpha_price='MLE': expected a positive number or 'mle'"),
        (lambda: TokenizeConfig(alpha_volume=-1.0), "tokenize.alpha_volume=-1.0"),
        (lambda: TrainConfig(variants=("splinegpt", "lstm")), "train.variants='lstm': expected one of 'splinegpt'"),
    ],
)
def test_a_typo_in_an_enum_like_setting_names_the_field_and_the_choices(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_the_embargo_is_a_window_and_no_shorter():
    assert SplitConfig().embargo_sessions == N_KNOTS == LOOKBACK + 1 == 65  # the number the folds have always had
    assert all(load_settings(p, env={"KP_SOURCE_PATH": "x"}).split.embargo_sessions >= N_KNOTS for p in PROFILES)
    with pytest.raises(ValueError, match=re.escape(f"embargo_sessions={N_KNOTS - 1}:")):
        SplitConfig(folds=2, embargo_sessions=N_KNOTS - 1)


def test_valid_settings_of_every_kind_load():
    assert TokenizeConfig(alpha_price="mle", alpha_volume=0.5, time_unit="calendar").alpha_price == "mle"
    assert IngestConfig(hl_policy="flag").hl_policy == "flag"


def test_every_kp_variable_is_read_by_load_settings_and_nowhere_else(tmp_path):
    env = {
        "KP_DROP_DIR": str(tmp_path / "drops"),
        "KP_DURABLE_WRITES": "1",
        "KP_TRAIN_SHARD_TRACE": str(tmp_path / "t"),
    }
    settings = load_settings("ci", warehouse=tmp_path / "wh", env=env)
    assert settings.drop_directory == (tmp_path / "drops").resolve()
    assert settings.warehouse.durable and settings.train.shard_trace == str(tmp_path / "t")
    plain = load_settings("ci", warehouse=tmp_path / "wh", env={})
    assert plain.drop_directory == plain.warehouse.root / "drop" and not plain.warehouse.durable
    assert plain.train.shard_trace is None
    import kinematic_pipeline

    package = Path(kinematic_pipeline.__file__).parent
    reads = re.compile(r"""(environ|getenv|env)\b[^\n]*["']KP_""")
    readers = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if reads.search(p.read_text()))
    # the CLI passes its flags to load_settings, not through os.environ
    assert readers == ["config/environment.py"], readers


def test_kp_pretrain_horizon_sets_the_gpts_pretraining_target_and_refuses_nonsense():
    from kinematic_pipeline.config import load_settings

    assert load_settings("ci", env={}).model.gpt.pretrain_horizon == 1  # the paper's next token
    assert load_settings("ci", env={"KP_PRETRAIN_HORIZON": "5"}).model.gpt.pretrain_horizon == 5
    for bad in ("0", "-1", "x", "64"):
        with pytest.raises(ValueError, match="(?i)horizon"):
            load_settings("ci", env={"KP_PRETRAIN_HORIZON": bad})
