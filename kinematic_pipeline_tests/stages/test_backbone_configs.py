"""One config per backbone: a foundation pins its own backbone's config alone, so a PatchTST size changed leaves the
GPT foundations loadable (and the other way round), while a change to its own backbone is refused in one line naming
the field, both values and the fix. Untrained foundations, saved as ``pretrain`` saves them: no training here."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kinematic_pipeline.config import Settings, load_settings
from kinematic_pipeline.models import build_model
from kinematic_pipeline.policy import Foundation
from kinematic_pipeline.training.run import load_foundation, save_foundation
from kinematic_pipeline.warehouse.layout import MODEL_FILE
from kinematic_pipeline.warehouse.verified import write_model_manifest


def _foundation(settings: Settings, variant: str) -> Foundation:
    """The seeded, untrained foundation of ``variant`` in the warehouse, with its manifest."""
    policy = Foundation(variant, 1234, settings.folds[0])
    folder = settings.warehouse.foundation_dir(policy)
    folder.mkdir(parents=True)
    torch.manual_seed(0)
    path = folder / MODEL_FILE
    save_foundation(settings, policy, build_model(variant, settings.model).state_dict(), path)
    write_model_manifest(folder, [path])
    return policy


def _resized(settings: Settings, backbone: str, **sizes) -> Settings:
    own = dataclasses.replace(settings.model.of(backbone), **sizes)
    return dataclasses.replace(settings, model=dataclasses.replace(settings.model, **{backbone: own}))


def test_a_foundation_pins_only_its_own_backbones_config(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    gpt, patchtst = _foundation(settings, "splinegpt"), _foundation(settings, "patchtst")
    for other_patchtst in (
        _resized(settings, "patchtst", d_model=64, n_layers=3),
        _resized(settings, "patchtst", mask_ratio=0.5),
    ):
        load_foundation(other_patchtst, gpt)  # PatchTST's sizes are no concern of a GPT foundation
    load_foundation(_resized(settings, "gpt", d_model=64, pretrain_horizon=5), patchtst)  # nor the GPT's of PatchTST's
    for backbone, policy, sizes, named in (
        ("gpt", gpt, {"d_model": 64}, "model.gpt.d_model=32 (settings: 64)"),
        ("gpt", gpt, {"pretrain_horizon": 5}, "model.gpt.pretrain_horizon=1 (settings: 5)"),
        ("patchtst", patchtst, {"d_model": 64}, "model.patchtst.d_model=32 (settings: 64)"),
    ):
        with pytest.raises(ValueError) as info:
            load_foundation(_resized(settings, backbone, **sizes), policy)
        line = str(info.value)
        assert "\n" not in line and named in line, line
        assert line.endswith(f"re-materialize {policy.variant.name}_foundation partition {policy.fit_key}"), line
        assert "model.gpt" not in line or backbone == "gpt", line  # the other backbone's config is not named
