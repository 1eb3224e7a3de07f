"""The model variants (paper "Tokenization Ablations and External Baseline") and the action codes.

One registry says, for each variant, which token asset it reads, which channels of the token shard feed
it, which backbone and head it trains, which files its fine-tuned head is saved in, and how the report
names it. Everything else (training, evaluation, assets, report) looks a variant up here. No dagster here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Buy/Sell/Hold: the class index of the classifier, the label code and the action code of the backtest.
BUY, SELL, HOLD = 0, 1, 2
UNKNOWN_LABEL = -1  # a label whose next-day return does not exist yet
ACTION_NAMES = ("Buy", "Sell", "Hold")  # indexed by code
ACTION_KEYS = ("buy", "sell", "hold")  # the same, as column and metadata keys


@dataclass(frozen=True)
class Variant:
    name: str
    token_asset: str  # the token asset it pretrains, fine-tunes and predicts on
    # Channels of the [64, 9] token window the backbone reads; None: all nine, anchored and z-scored with
    # corpus_stats. PatchTST reads raw_tokens' ln close (y_{k+1}) and ln volume, unnormalized (RevIN inside).
    channels: tuple[int, ...] | None
    backbone: str  # "gpt": KinematicGPT; "patchtst": PatchTST
    head: str  # "lora": PEFT LoRA + classification head, saved in adapter/; "probe": a linear probe, head.pt
    display_name: str  # the paper's name (table headers)
    short_name: str  # the paper's column abbreviation
    title: str  # one line for asset descriptions

    @property
    def normalized(self) -> bool:
        """Whether its windows are anchored and z-scored with corpus_stats."""
        return self.channels is None

    @property
    def tokenization(self) -> str:
        """The token asset without its suffix, as corpus_stats names it (``spline``, ``fd``, ``raw``)."""
        return self.token_asset.removesuffix("_tokens")

    def head_path(self, adapter_dir: Path) -> Path:
        """What ``finetune`` saves in an adapter folder: PEFT's ``adapter/`` (LoRA + head) or the probe's ``head.pt``."""
        return Path(adapter_dir) / ("head.pt" if self.head == "probe" else "adapter")

    def head_saved(self, adapter_dir: Path) -> bool:
        """Whether a fine-tuned head was saved in ``adapter_dir`` (PEFT writes adapter_config.json last but one)."""
        path = self.head_path(adapter_dir)
        return path.is_file() if self.head == "probe" else (path / "adapter_config.json").is_file()

    @property
    def head_description(self) -> str:
        return "linear probe on the frozen backbone" if self.head == "probe" else "PEFT LoRA on layers 1, 2 and 4"


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "splinegpt",
            "spline_tokens",
            None,
            "gpt",
            "lora",
            "SplineGPT",
            "Spline",
            "SplineGPT (continuous spline tokens)",
        ),
        Variant(
            "patchtst",
            "raw_tokens",
            (0, 4),
            "patchtst",
            "probe",
            "PatchTST",
            "Patch",
            "PatchTST (channel-independent patches, RevIN, masked-patch pretraining)",
        ),
        Variant(
            "rawgpt_fd",
            "fd_tokens",
            None,
            "gpt",
            "lora",
            "RawGPT-FD",
            "FD",
            "RawGPT-FD (finite-difference tokens, same backbone)",
        ),
        Variant(
            "rawgpt",
            "raw_tokens",
            None,
            "gpt",
            "lora",
            "RawGPT",
            "Raw",
            "RawGPT (raw values and first differences, same backbone)",
        ),
    )
}  # in the paper's column order
VARIANT_NAMES = tuple(VARIANTS)
BENCHMARK = "buy_and_hold"  # the Buy & Hold rows of the backtests (no tau, seed or model)
BENCHMARK_DISPLAY_NAME, BENCHMARK_SHORT_NAME = "Buy & Hold", "Mkt"


def variant(name: str) -> Variant:
    """The registered variant ``name``; a ValueError naming the choices otherwise."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown model variant {name!r}: expected one of {', '.join(VARIANT_NAMES)}") from None


def display_name(name: str) -> str:
    return BENCHMARK_DISPLAY_NAME if name == BENCHMARK else variant(name).display_name


def short_name(name: str) -> str:
    return BENCHMARK_SHORT_NAME if name == BENCHMARK else variant(name).short_name
