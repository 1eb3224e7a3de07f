"""Each family of variant and its predictor: a ``ModelVariant``'s is a ``ModelPredictor``, a ``ProbeVariant``'s a
``ProbePredictor``, a ``RuleVariant``'s a ``RulePredictor`` (keyed by ``Variant.family``, as a head by its kind in
``models.heads.HEADS``). No dagster and no torch here."""

from __future__ import annotations

from kinematic_pipeline.predictors.base import Predictor
from kinematic_pipeline.predictors.features import ProbePredictor, RulePredictor
from kinematic_pipeline.predictors.model import ModelPredictor
from kinematic_pipeline.variants import Variant

PREDICTORS: dict[str, type[Predictor]] = {"model": ModelPredictor, "probe": ProbePredictor, "rule": RulePredictor}


def predictor(variant: Variant) -> Predictor:
    """What makes ``variant``'s policies' predictions."""
    return PREDICTORS[variant.family](variant)
