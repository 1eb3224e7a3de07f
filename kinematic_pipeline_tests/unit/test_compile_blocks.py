"""``train.compile``: which runs compile their repeated blocks (regional compilation), without compiling anything."""

from __future__ import annotations

import dataclasses
import os

import pytest

from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.config.profiles import profile_settings
from kinematic_pipeline.models import build_model
from kinematic_pipeline.training.trainer import INDUCTOR_CACHE, compile_blocks


@pytest.mark.parametrize(("variant", "blocks"), [("splinegpt", "blocks"), ("patchtst", "layers")])
def test_only_a_run_of_the_minimum_steps_compiles_and_each_block_is_compiled_in_place(
    variant, blocks, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "restored after the test")  # then unset: compile_blocks sets it
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    model_cfg = profile_settings("real").model
    cfg = dataclasses.replace(TrainConfig(), compile="regional", compile_min_steps=400)
    model = build_model(variant, model_cfg)
    names = list(model.state_dict())
    assert not compile_blocks(model, cfg, 399, tmp_path)  # a warm start of 100 steps, an adapter of 300: eager
    assert not compile_blocks(model, TrainConfig(), 10_000, tmp_path)  # "none", the default of every profile
    assert all(block._compiled_call_impl is None for block in getattr(model, blocks))
    assert compile_blocks(model, cfg, 400, tmp_path)
    assert all(block._compiled_call_impl is not None for block in getattr(model, blocks))
    assert list(model.state_dict()) == names  # saved under the eager model's names
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / INDUCTOR_CACHE)
    with pytest.raises(ValueError, match="train.compile"):
        TrainConfig(compile="everything")
