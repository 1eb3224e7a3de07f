"""Decision-time features of a token window, for the probes and rules (``variants.BASELINES``).

A window [64, 9] of day t (fitted on bars up to t only) becomes:

- for a tokenization (``spline``, ``fd``, ``raw``): its last five tokens (45 values, c0 and c~0 anchored to the
  window's first token as ``windows.py`` does) and each channel's standard deviation over the window (9
  values, shift-invariant, so anchoring does not change them): 54 features;
- from the raw tokens, whose token 63 holds ln C_t and the last log return (``tokenize/baselines.py``):
  ``ret1`` (ln C_t - ln C_{t-1}), ``vol20`` (the sample std of the last 20 daily log returns) and ``ret20``
  (ln C_t - ln C_{t-20}). The trivial feature set is (ret1, vol20); the momentum rules read ret1 and ret20.

Pure numpy (no dagster, no torch). ``slow_token_features`` in the tests is the loop twin.
"""

from __future__ import annotations

import numpy as np

from kinematic_pipeline.windows import ANCHORED_CHANNELS, N_CHANNELS, N_TOKENS

N_LAST = 5  # the last tokens a probe sees
TOKEN_FEATURES = tuple(f"t{k}_c{c}" for k in range(N_TOKENS - N_LAST, N_TOKENS) for c in range(N_CHANNELS)) + tuple(
    f"std_c{c}" for c in range(N_CHANNELS)
)
RAW_EXTRAS = ("ret1", "vol20", "ret20")
TRIVIAL_FEATURES = ("ret1", "vol20")
VOL_DAYS, MOMENTUM_DAYS = 20, 20


def token_features(tokens: np.ndarray) -> np.ndarray:
    """[n, 64, 9] windows -> [n, 54] float32: the last five tokens (anchored) and each channel's window std."""
    tokens = np.asarray(tokens, dtype=np.float32)
    last = tokens[:, N_TOKENS - N_LAST :, :].copy()
    for ch in ANCHORED_CHANNELS:
        last[:, :, ch] -= tokens[:, :1, ch]
    std = tokens.astype(np.float64).std(axis=1, ddof=0).astype(np.float32)
    return np.concatenate([last.reshape(len(tokens), -1), std], axis=1)


def raw_extras(raw_tokens: np.ndarray) -> np.ndarray:
    """[n, 64, 9] raw-token windows -> [n, 3] float64: ret1, vol20, ret20 (``RAW_EXTRAS``)."""
    raw = np.asarray(raw_tokens, dtype=np.float64)
    returns = raw[:, N_TOKENS - VOL_DAYS :, 1]  # Dy of the last 20 knots: the last 20 daily log returns
    ret20 = raw[:, N_TOKENS - 1, 0] - raw[:, N_TOKENS - 1 - MOMENTUM_DAYS, 0]
    return np.stack([raw[:, N_TOKENS - 1, 1], returns.std(axis=1, ddof=1), ret20], axis=1)


def feature_columns(feature_set: str) -> tuple[str, ...]:
    """The columns of a features file a probe of ``feature_set`` reads."""
    return TRIVIAL_FEATURES if feature_set == "trivial" else TOKEN_FEATURES


def features_asset_name(tokenization: str) -> str:
    """The features asset of a tokenization (``spline_features``): the decision-time features of its windows."""
    return f"{tokenization}_features"


def features_tokenization(feature_set: str) -> str:
    """Which tokenization's features file holds ``feature_set`` (the trivial pair: the raw tokens')."""
    return "raw" if feature_set == "trivial" else feature_set
