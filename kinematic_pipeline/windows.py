"""The window geometry, its one home: 65 price knots t_0..t_64, 64 intervals (one token each), 9 channels.

What a channel is and how it is normalized belongs to its tokenization (``tokenizations/``). Pure constants.
"""

from __future__ import annotations

N_TOKENS, N_CHANNELS = 64, 9  # tokens per window; 4 price + 5 volume coefficients per token
N_KNOTS = N_TOKENS + 1  # price samples per window (volume: one measurement per interval, N_TOKENS)
LOOKBACK = N_KNOTS - 1  # sessions before a window's last day
N_PRICE_COEFFS, N_VOLUME_COEFFS = 4, 5  # c0..c3 of the cubic, c~0..c~4 of the quartic
