"""The raw tokens (RawGPT): raw log price and log volume and their first differences, higher orders zeroed.

Token 63 holds ln C_t and the last log return, so the raw tokens also give the features a rule or the trivial
probe reads (``RAW_EXTRAS``): ``ret1`` (ln C_t - ln C_t-1), ``vol20`` (the sample std of the last 20 daily log
returns) and ``ret20`` (ln C_t - ln C_t-20). The trivial feature set is (ret1, vol20); the momentum rules read
ret1 and ret20. ``slow_token_features`` in the tests is the features' loop twin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kinematic_pipeline.tokenizations.differences import DIFFERENCE_CHANNELS, DifferenceTokenization
from kinematic_pipeline.windows import N_TOKENS

RAW_EXTRAS = ("ret1", "vol20", "ret20")
TRIVIAL_FEATURES = ("ret1", "vol20")
VOL_DAYS, MOMENTUM_DAYS = 20, 20


def raw_extras(raw_tokens: np.ndarray) -> np.ndarray:
    """[n, 64, 9] raw-token windows -> [n, 3] float64: ret1, vol20, ret20 (``RAW_EXTRAS``)."""
    raw = np.asarray(raw_tokens, dtype=np.float64)
    returns = raw[:, N_TOKENS - VOL_DAYS :, 1]  # Dy of the last 20 knots: the last 20 daily log returns
    ret20 = raw[:, N_TOKENS - 1, 0] - raw[:, N_TOKENS - 1 - MOMENTUM_DAYS, 0]
    return np.stack([raw[:, N_TOKENS - 1, 1], returns.std(axis=1, ddof=1), ret20], axis=1)


@dataclass(frozen=True)
class RawTokenization(DifferenceTokenization):
    """Differences of orders (2, 2); its features file also holds ``RAW_EXTRAS`` (feature sets raw and trivial)."""

    @property
    def feature_sets(self) -> dict[str, tuple[str, ...]]:
        return {self.name: self.token_features, "trivial": TRIVIAL_FEATURES}

    def features(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        extras = raw_extras(tokens)
        return super().features(tokens) | {name: extras[:, j] for j, name in enumerate(RAW_EXTRAS)}


RAW = RawTokenization(
    name="raw",
    channels=DIFFERENCE_CHANNELS,
    called="raw values",
    description="RawGPT baseline: raw log price/volume and first differences, higher orders zeroed.",
    price_orders=2,
    volume_orders=2,
)
