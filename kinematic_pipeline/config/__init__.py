"""Configuration: frozen dataclasses, four named profiles and the operator's environment variables.

``settings.py`` holds the dataclasses (``Settings`` and its sections), ``backbones.py`` one config per backbone,
``profiles.py`` the named profiles (``ci``, ``demo``, ``real``, ``paper``) and ``environment.py`` ``load_settings``,
the only reader of the ``KP_*`` variables (a grep test holds it to that). Import from here:
``from kinematic_pipeline.config import Settings``. Nothing here imports dagster.
"""

from kinematic_pipeline.config.backbones import GPTConfig, ModelConfig, PatchTSTConfig
from kinematic_pipeline.config.environment import TRAIN_BUDGET_ENV, TRAIN_ENV, check_training_cut, load_settings
from kinematic_pipeline.config.profiles import (
    CPU_LORA_DROPOUT,
    PAPER_TEST_TICKERS,
    PROFILES,
    SMALL_CPU_MODEL,
    profile_settings,
)
from kinematic_pipeline.config.settings import (
    ALPHA_MLE_SCOPES,
    FOLD_PERIODS,
    HL_POLICIES,
    SOURCES,
    TAU_SWEEP_FOLDS,
    TIME_UNITS,
    BacktestConfig,
    DataConfig,
    EvalConfig,
    IngestConfig,
    Settings,
    SplitConfig,
    SyntheticConfig,
    TokenizeConfig,
    TrainConfig,
    check_alpha,
    check_choice,
)

__all__ = [
    "ALPHA_MLE_SCOPES",
    "BacktestConfig",
    "CPU_LORA_DROPOUT",
    "FOLD_PERIODS",
    "HL_POLICIES",
    "PAPER_TEST_TICKERS",
    "PROFILES",
    "SMALL_CPU_MODEL",
    "SOURCES",
    "TAU_SWEEP_FOLDS",
    "TIME_UNITS",
    "TRAIN_BUDGET_ENV",
    "TRAIN_ENV",
    "DataConfig",
    "EvalConfig",
    "GPTConfig",
    "IngestConfig",
    "ModelConfig",
    "PatchTSTConfig",
    "Settings",
    "SplitConfig",
    "SyntheticConfig",
    "TokenizeConfig",
    "TrainConfig",
    "check_alpha",
    "check_choice",
    "check_training_cut",
    "load_settings",
    "profile_settings",
]
