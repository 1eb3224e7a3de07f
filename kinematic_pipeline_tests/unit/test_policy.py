"""One identity for a trained policy: every spelling (partition keys, file stems, folders, lineage arguments)
comes from the same value, and reads back to it; tau has one key, one column and one comparison."""

from __future__ import annotations

import datetime as dt

import pytest

from kinematic_pipeline.folds import Fold, fold_labelled
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.tasks.buy_sell_hold import (
    PAPER_CLASS_WEIGHTS,
    TAU_TOLERANCE,
    BuySellHold,
    at_tau,
    same_tau,
    tau_column,
    tau_key,
)
from kinematic_pipeline.variants import variant
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.layout import VALIDATION_PREDICTIONS

CUT = Fold(None, dt.date(2018, 12, 31), dt.date(2018, 12, 28), dt.date(2019, 1, 2), None)  # a single cut
FOLD_2019 = Fold("2019", dt.date(2018, 12, 31), dt.date(2018, 12, 28), dt.date(2019, 1, 2), dt.date(2019, 12, 31))
FOLD_2020 = Fold("2020", dt.date(2019, 12, 31), dt.date(2019, 12, 30), dt.date(2020, 1, 2), None)
SINGLE, WALK_FORWARD = (CUT,), (FOLD_2019, FOLD_2020)
TASKS = (BuySellHold(0.01, PAPER_CLASS_WEIGHTS), BuySellHold(0.0025, PAPER_CLASS_WEIGHTS))  # the run's


def test_a_policy_formats_and_parses_its_partition_keys():
    policy = Policy("splinegpt", BuySellHold(0.01), 1234, CUT)
    assert policy.key == "1234|0.01" and Policy.from_key("splinegpt", policy.key, SINGLE, TASKS) == policy
    assert Policy.from_key("patchtst", "1235", SINGLE, TASKS) == Foundation("patchtst", 1235, CUT)
    assert policy.foundation == Foundation("splinegpt", 1234, CUT) and policy.foundation.task is None
    folded = Policy.named(WALK_FORWARD, "rawgpt", 7, BuySellHold(0.0025), "2019")
    assert folded.fit_key == "2019@7" and folded.key == "2019@7|0.0025"
    assert Policy.from_key("rawgpt", folded.key, WALK_FORWARD, TASKS) == folded
    foundation = Policy.from_key("rawgpt", "2019@7", WALK_FORWARD, TASKS)
    assert type(foundation) is Foundation and foundation.key == "2019@7"  # a foundation by its type, not a None


def test_a_policy_holds_its_variant_and_fold_not_their_names():
    policy = Policy.from_key("rawgpt", "2020@7|0.01", WALK_FORWARD, TASKS)
    assert policy.variant is variant("rawgpt") and policy.fold is FOLD_2020
    assert policy.fold.train_end == dt.date(2019, 12, 31) and policy.variant.token_asset == "raw_tokens"
    assert (
        Policy.from_row(
            {"variant": "rawgpt", "seed": 7, "tau": 0.01, "fold": "2020"},
            WALK_FORWARD,
            TASKS,
        )
        == policy
    )
    single = {"variant": "rawgpt", "seed": 7, "tau": 0.01, "fold": CUT.label}  # "all": the label's inverse
    assert CUT.label == "all" and Policy.from_row(single, SINGLE, TASKS).fold is CUT
    assert fold_labelled(WALK_FORWARD, "2019") is FOLD_2019
    with pytest.raises(TypeError, match="a Policy's fold is a Fold"):
        Policy("rawgpt", BuySellHold(0.01), 7, "2020")
    with pytest.raises(ValueError, match=r"fold '2030' is not one of this run's folds \(2019, 2020; split.folds=2\)"):
        Policy.from_key("rawgpt", "2030@7|0.01", WALK_FORWARD, TASKS)


def test_a_policy_names_its_files_folders_and_lineage_command(tmp_path):
    policy = Policy("splinegpt", BuySellHold(0.01), 1234, CUT)
    wh = Warehouse(tmp_path)
    assert policy.stem == "splinegpt_tau0.01_seed1234"
    assert wh.evaluation_file("backtests", policy) == tmp_path / "backtests" / "splinegpt_tau0.01_seed1234.parquet"
    assert wh.adapter_dir(policy) == tmp_path / "models/splinegpt/seed=1234/adapters/tau=0.01"
    assert wh.foundation_checkpoint(policy) == tmp_path / "models/splinegpt/seed=1234/foundation/model.pt"
    assert (
        wh.predictions_extra(VALIDATION_PREDICTIONS, policy)
        == tmp_path / "predictions/validation/splinegpt_tau0.01_seed1234.parquet"
    )
    assert policy.lineage_args == "--model splinegpt --tau 0.01 --seed 1234"
    folded = policy.foundation.on(BuySellHold(0.01))
    assert folded == policy and Policy("splinegpt", BuySellHold(0.01), 1234, FOLD_2019).stem.endswith(
        "_seed1234_fold2019"
    )
    assert not hasattr(policy.foundation, "stem")  # a foundation has no evaluation shards
    with pytest.raises(TypeError, match="a Policy's task is a Task"):
        Policy("splinegpt", 0.01, 1234, CUT)  # a tau is not a task


def test_a_tau_read_back_from_text_is_the_same_tau():
    for tau in (0.0025, 0.005, 0.01, 0.02):
        key = tau_key(tau)
        assert same_tau(float(key), tau) and Policy("rawgpt", BuySellHold(float(key)), 1, CUT) == Policy(
            "rawgpt", BuySellHold(tau), 1, CUT
        )
        assert hash(Policy("rawgpt", BuySellHold(float(key)), 1, CUT)) == hash(
            Policy("rawgpt", BuySellHold(tau), 1, CUT)
        )
    assert tau_column(0.0025) == "label_tau_0p0025" and tau_key(0.0025) == "0.0025"
    assert not same_tau(0.01, 0.01 + 10 * TAU_TOLERANCE)


def test_at_tau_selects_the_rows_of_one_tau_and_never_a_null():
    import polars as pl

    frame = pl.DataFrame({"tau": [0.01, 0.02, None, 0.01 + 1e-15]})
    assert frame.filter(at_tau(0.01))["tau"].len() == 2


def test_an_unknown_variant_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="unknown model variant 'nope': expected one of splinegpt"):
        Policy("nope", BuySellHold(0.01), 1, CUT)


def test_a_policy_keys_task_is_one_of_the_runs_tasks_looked_up_by_its_key():
    from kinematic_pipeline_tests.unit.test_task_axis import UpDown

    tasks = (*TASKS, UpDown())
    policy = Policy.from_key("rawgpt", "2020@7|updown1", WALK_FORWARD, tasks)
    assert policy.task is tasks[-1] and policy.key == "2020@7|updown1"  # a task of another kind: no float parsed
    with pytest.raises(ValueError, match=r"'0.02' is not the key of one of the run's tasks \(0.01, 0.0025\)"):
        Policy.from_key("rawgpt", "2020@7|0.02", WALK_FORWARD, TASKS)


def test_a_view_row_names_its_task_by_its_key_or_buy_sell_holds_by_its_tau():
    row = {"variant": "rawgpt", "seed": 7, "fold": "2020"}
    assert Policy.from_row({**row, "tau": 0.0025}, WALK_FORWARD, TASKS).task is TASKS[1]
    assert Policy.from_row({**row, "task": "0.01"}, WALK_FORWARD, TASKS).task is TASKS[0]
    with pytest.raises(ValueError, match=r"'0.03' is not the key of one of the run's tasks \(0.01, 0.0025\)"):
        Policy.from_row({**row, "tau": 0.03}, WALK_FORWARD, TASKS)
