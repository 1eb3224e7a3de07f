"""Spline tokenization (DESIGN.md "Spline enrichment"): windows of log price / log volume -> tokens.

- ``tokenize_price_windows(log_price[n, 65], alpha, times) -> [n, 64, 4]``: paper eq. (1), the natural
  cubic smoothing spline; token k = (c0, c1, c2, c3), Taylor coefficients at knot t_k.
- ``tokenize_volume_windows(log_volume[n, 64], alpha, times) -> [n, 64, 5]``: paper eq. (2), the C3
  quartic spline fitted to interval integrals; token k = (c~0, ..., c~4).
- alpha by maximum marginal likelihood (``alpha``) and the baseline tokens of differences (``baselines``).

The public wrappers of the pipeline's tokenizations are in ``tokenizations/``.
"""

import os

import numba

# Numba's default OpenMP layer and torch's own OpenMP runtime in one process (a Dagster run that
# tokenizes and then trains) leave two sets of spinning threads: training ran 30-75x slower in our
# measurement. Numba's own work queue is as fast for these kernels and does not spin. It must not be
# entered from two Python threads at once: the pipeline calls the kernels from one thread.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

from kinematic_pipeline.tokenize.alpha_mle import (  # noqa: E402
    AlphaEstimate,
    estimate_alpha_price,
    estimate_alpha_price_pooled,
    estimate_alpha_volume,
    estimate_alpha_volume_pooled,
    price_profile_log_likelihood,
    volume_profile_log_likelihood,
)
from kinematic_pipeline.tokenize.baselines import difference_tokens, fd_tokens, raw_tokens
from kinematic_pipeline.tokenize.price import N_PRICE_COEF, tokenize_price_windows
from kinematic_pipeline.tokenize.volume import N_VOLUME_COEF, tokenize_volume_windows

__all__ = [
    "AlphaEstimate",
    "N_PRICE_COEF",
    "N_VOLUME_COEF",
    "estimate_alpha_price",
    "estimate_alpha_price_pooled",
    "estimate_alpha_volume",
    "estimate_alpha_volume_pooled",
    "difference_tokens",
    "fd_tokens",
    "price_profile_log_likelihood",
    "raw_tokens",
    "tokenize_price_windows",
    "tokenize_volume_windows",
    "volume_profile_log_likelihood",
]
