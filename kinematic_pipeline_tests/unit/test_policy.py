"""One identity for a trained policy: every spelling (partition keys, file stems, folders, lineage arguments)
comes from the same value, and reads back to it; tau has one key, one column and one comparison."""

from __future__ import annotations

import pytest

from kinematic_pipeline.label_rules import TAU_TOLERANCE, at_tau, same_tau, tau_column, tau_key
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.layout import VALIDATION_PREDICTIONS


def test_a_policy_formats_and_parses_its_partition_keys():
    policy = Policy("splinegpt", 1234, 0.01)
    assert policy.key == "1234|0.01" and Policy.from_key("splinegpt", policy.key) == policy
    assert Policy.from_fit_key("patchtst", "1235") == Policy("patchtst", 1235) == Policy.from_key("patchtst", "1235")
    assert policy.foundation == Policy("splinegpt", 1234) and policy.foundation.tau is None
    folded = Policy("rawgpt", 7, 0.0025, fold="2019")
    assert folded.fit_key == "2019@7" and folded.key == "2019@7|0.0025"
    assert Policy.from_key("rawgpt", folded.key) == folded and Policy.from_key("rawgpt", "2019@7").tau is None


def test_a_policy_names_its_files_folders_and_lineage_command(tmp_path):
    policy = Policy("splinegpt", 1234, 0.01)
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
    with pytest.raises(ValueError, match="is a foundation: it has no tau"):
        _ = policy.foundation.stem


def test_a_tau_read_back_from_text_is_the_same_tau():
    for tau in (0.0025, 0.005, 0.01, 0.02):
        key = tau_key(tau)
        assert same_tau(float(key), tau) and Policy("rawgpt", 1, float(key)) == Policy("rawgpt", 1, tau)
        assert hash(Policy("rawgpt", 1, float(key))) == hash(Policy("rawgpt", 1, tau))
    assert tau_column(0.0025) == "label_tau_0p0025" and tau_key(0.0025) == "0.0025"
    assert not same_tau(0.01, 0.01 + 10 * TAU_TOLERANCE)


def test_at_tau_selects_the_rows_of_one_tau_and_never_a_null():
    import polars as pl

    frame = pl.DataFrame({"tau": [0.01, 0.02, None, 0.01 + 1e-15]})
    assert frame.filter(at_tau(0.01))["tau"].len() == 2


def test_an_unknown_variant_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="unknown model variant 'nope': expected one of splinegpt"):
        Policy("nope", 1, 0.01)
