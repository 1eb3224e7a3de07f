"""The three tokenizations (paper "Tokenization Ablations"): one table says what each token asset is.

Each token asset has the same shard layout (``stages/tokenize.py``: one float32 [64, 9] window per ticker and
day); the table says how its tokens are computed (the exact splines, or a baseline of differences), how
corpus statistics and the variants call it, and how the UI describes it. No dagster here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenKind:
    asset: str  # the token asset: a folder of day shards and a catalog view
    tokenization: str  # its short name: corpus statistics (corpus_stats/<tokenization>.parquet), variants
    spline: bool  # True: exact optimal splines (alphas, end positions); False: a baseline of differences
    description: str

    @property
    def corpus_stats_asset(self) -> str:
        """The asset of its channel statistics: ``spline_corpus_stats``."""
        return f"{self.tokenization}_corpus_stats"


TOKEN_KINDS: dict[str, TokenKind] = {
    k.asset: k
    for k in (
        TokenKind(
            asset="spline_tokens",
            tokenization="spline",
            spline=True,
            description="Exact optimal-spline tokens (paper eq. 1 and 2): per ticker, the 64x9 window ending on "
            "the day (c0..c3 of log price, c~0..c~4 of log volume), float32, unanchored.",
        ),
        TokenKind(
            asset="fd_tokens",
            tokenization="fd",
            spline=False,
            description="RawGPT-FD baseline: backward finite differences of log price (orders 0-3) and log "
            "volume (0-4).",
        ),
        TokenKind(
            asset="raw_tokens",
            tokenization="raw",
            spline=False,
            description="RawGPT baseline: raw log price/volume and first differences, higher orders zeroed.",
        ),
    )
}
TOKEN_ASSETS = tuple(TOKEN_KINDS)
SPLINE_TOKENS = "spline_tokens"  # the labels' end positions and the report's kinematics come from it


def token_kind(asset: str) -> TokenKind:
    try:
        return TOKEN_KINDS[asset]
    except KeyError:
        raise ValueError(f"unknown token asset {asset!r}: expected one of {', '.join(TOKEN_ASSETS)}") from None
