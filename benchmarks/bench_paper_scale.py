"""The paper's scale on an accelerator: SplineGPT at the paper's size (d_model 512, 4 layers, 8 heads, d_ff 2048:
~12.6 M parameters) pretrained on the real file's spline windows for a fixed number of steps, per variant (float32,
bf16 autocast, bf16 with the repeated block compiled, a larger batch), with windows/s, MFU and the projected time of
the paper's 5 epochs over 22.5 M windows (paper, "Training and Testing Data Strategy").

    python benchmarks/bench_paper_scale.py [--file PARQUET] [--tickers 64] [--steps 400] [--warmup 30]
        [--device cuda] [--batch 256] [--variants fp32,bf16,bf16-compile,bf16-batch-x4] [--json PATH]
    python benchmarks/bench_paper_scale.py --write-subset PATH [--tickers 64]   # the bars a device machine needs

The windows: the ``--tickers`` names of the file with the most sessions, every 65-session window of each ending on
or before 2022-12-31 with 65 prices and 64 positive volumes, tokenized by the pipeline's spline tokenization (alpha 5,
the paper's) and normalized as the pipeline does (c0 and c~0 anchored to the window's first token, the other channels
z-scored over these windows); they sit on the device, and each step draws a uniform batch of them. One step is the
pipeline's: the model's ``pretrain_loss`` (next-token MSE), backward, clipping at 1.0 and AdamW
(``training.modules.adamw_with_cosine``: decay on matrices only) at the paper's 6e-4. Per variant, ``--warmup``
untimed steps (a compiled variant's compile among them: reported apart), then ``--steps`` timed ones between two
device synchronizations. The FLOPs of one step are counted by ``torch.utils.flop_counter.FlopCounterMode``
(forward and backward; the optimizer's elementwise work is not counted); MFU is against the device's dense bf16
peak where its name is known (``SPEC_BF16``) and against a square bf16 (float32 for fp32) matmul measured in the
same run. The loss after the timed steps is printed beside each, so that a faster variant is seen to train alike.

On the workplace's device machine (Python 3.12 with torch, lightning, numba, scipy and pyarrow, but no polars; at most
64 MiB travel): here, ``echo /.bench/ >> .git/info/exclude``, ``python benchmarks/bench_paper_scale.py --write-subset
.bench/bars.parquet`` (3.3 MB) and ``pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation
cp --platform manylinux_2_17_x86_64 -d .bench polars==V polars-runtime-32==V`` (V: constraints.txt's; 55 MB); there,
with ``.bench`` carried: ``python3 -m pip install -q --no-index --no-deps --target /tmp/site .bench/*.whl &&
PYTHONPATH=/tmp/site python3 benchmarks/bench_paper_scale.py --file .bench/bars.parquet --json $OUT/paper_scale.json``
(the default variants: a few minutes on an H200, tokenizing included; it must end inside 8). On a CPU (``--device
cpu``) it runs the same code path: the test suite runs it on a few windows at a batch of 4.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from kinematic_pipeline.config.profiles import profile_settings  # noqa: E402
from kinematic_pipeline.models import build_model, count_parameters  # noqa: E402
from kinematic_pipeline.tokenizations import SPLINE  # noqa: E402
from kinematic_pipeline.training.modules import adamw_with_cosine  # noqa: E402
from kinematic_pipeline.windows import N_KNOTS, N_TOKENS  # noqa: E402

REAL_FILE = ROOT.parent / "shared" / "data" / "sp500_daily_2000_2022.parquet"
LAST_DAY = dt.date(2022, 12, 31)  # nothing after the development data's end
PAPER_WINDOWS, PAPER_EPOCHS, PAPER_PARAMETERS = 22_500_000, 5, 12.6e6
PAPER = profile_settings("paper")  # the paper's model (d_model 512, dropout 0.1) and training (6e-4, batch 256)
PAPER_BATCH = PAPER.train.batch_size
# Dense bf16 tensor-core peaks from the vendors' datasheets (SXM parts), matched on the device's name.
SPEC_BF16 = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12, "L40S": 362.05e12, "RTX 4090": 165.2e12}


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    bf16: bool  # autocast to bfloat16
    compiled: bool  # each block compiled (regional compilation)
    scale: int = 1  # the batch, in ``--batch``es (the paper's 256 by default)


VARIANTS = {
    v.name: v
    for v in (
        Variant("fp32", False, False),
        Variant("bf16", True, False),
        Variant("bf16-compile", True, True),
        Variant("bf16-batch-x4", True, False, 4),
        Variant("bf16-compile-batch-x4", True, True, 4),
    )
}


def read_bars(path: Path, n_tickers: int | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The ``n_tickers`` names with the most sessions through 2022 (None: all), ties by name: ticker -> (log close,
    log volume) in date order; a zero volume (no trade recorded) is NaN, so no window spans it."""
    table = pl.from_arrow(pq.read_table(path, columns=["ticker", "date", "close", "volume"]))
    table = table.filter(pl.col("date") <= LAST_DAY).sort("ticker", "date")
    counts = table.group_by("ticker").len().sort(["len", "ticker"], descending=[True, False])
    chosen = set(counts["ticker"].head(n_tickers or counts.height).to_list())
    out = {}
    for (ticker,), rows in table.filter(pl.col("ticker").is_in(chosen)).group_by("ticker", maintain_order=True):
        close, volume = rows["close"].to_numpy().astype(np.float64), rows["volume"].to_numpy().astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[ticker] = (np.log(close), np.where(volume > 0, np.log(volume), np.nan))
    return out


def write_subset(source: Path, target: Path, n_tickers: int) -> None:
    """The columns this benchmark reads of the ``n_tickers`` it would choose, zstd: what travels to a device
    machine (64 tickers: 3.3 MB)."""
    table = pq.read_table(source, columns=["ticker", "date", "close", "volume"])
    chosen = sorted(read_bars(source, n_tickers))
    mask = np.isin(table.column("ticker").to_numpy(zero_copy_only=False), chosen)
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.filter(mask), target, compression="zstd", compression_level=19)
    print(f"{target}: {int(mask.sum()):,} bars of {len(chosen)} tickers, {target.stat().st_size / 1e6:.1f} MB")


def spline_windows(bars: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Normalized float32 windows [n, 64, 9]: each ticker's complete 65-session windows, spline-tokenized."""
    price, volume = [], []
    for log_close, log_volume in bars.values():
        p, v = complete(log_close, log_volume)
        price.append(p)
        volume.append(v)
    if not sum(len(p) for p in price):
        raise ValueError(f"no ticker has {N_KNOTS} sessions: nothing to tokenize")
    windows = SimpleNamespace(
        tickers=[""] * sum(len(p) for p in price),
        log_price=np.ascontiguousarray(np.concatenate(price)),
        log_volume=np.ascontiguousarray(np.concatenate(volume)),
        times=None,
    )
    alphas = SimpleNamespace(for_tickers=lambda tickers: (PAPER.tokenize.alpha_price, PAPER.tokenize.alpha_volume))
    tokens, _ = SPLINE.tokenize(windows, alphas)
    tokens = tokens[np.isfinite(tokens).all(axis=(1, 2))].copy()
    flat = tokens.astype(np.float64).reshape(-1, tokens.shape[-1])
    stats = pl.DataFrame(
        {
            "tokenization": SPLINE.name,
            "channel": list(SPLINE.zscored),
            "mean": [float(flat[:, c].mean()) for c in SPLINE.zscored],
            "std": [float(max(flat[:, c].std(), 1e-12)) for c in SPLINE.zscored],
        }
    )
    return SPLINE.normalize(tokens, stats)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, tries: int = 10) -> float:
    """FLOP/s of an n x n x n matmul in ``dtype`` on ``device`` (2 n^3 per product), the mean of ``tries`` after
    three warm-ups."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(tries):
        a @ b
    synchronize(device)
    return 2 * n**3 * tries / (time.perf_counter() - t0)


def spec_peak(device: torch.device) -> tuple[str, float | None]:
    """The device's name and its datasheet's dense bf16 peak (None where unknown: a CPU, an unlisted GPU)."""
    if device.type != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    return name, next((peak for key, peak in SPEC_BF16.items() if key in name), None)


def paper_model(device: torch.device) -> torch.nn.Module:
    """SplineGPT at the paper's size and dropout (the paper profile's model)."""
    return build_model("splinegpt", PAPER.model).to(device)


def measure(variant: Variant, data: torch.Tensor, batch: int, steps: int, warmup: int, seed: int) -> dict:
    """One variant at ``batch`` x its scale: ``warmup`` untimed steps (at least one: the compile), then ``steps``
    timed ones; windows/s, FLOPs per step, the loss."""
    device, batch = data.device, batch * variant.scale
    torch.manual_seed(seed)
    model = paper_model(device)
    model.train()
    if variant.compiled:
        for block in model.blocks:  # regional compilation: the repeated block, compiled once, reused 4 times
            block.compile()
    cfg = PAPER.train
    optimizer, _ = adamw_with_cosine(list(model.named_parameters()), cfg.lr, cfg.weight_decay, warmup + steps)
    draw = torch.Generator(device=device).manual_seed(seed)

    def step() -> torch.Tensor:
        x = data[torch.randint(len(data), (batch,), device=device, generator=draw)]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=variant.bf16):
            loss = model.pretrain_loss(x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        return loss.detach()

    t0 = time.perf_counter()
    step()
    synchronize(device)
    first = time.perf_counter() - t0  # the compile, for a compiled variant
    for _ in range(max(warmup - 1, 0)):
        step()
    synchronize(device)
    t0 = time.perf_counter()
    losses = [step() for _ in range(steps)]
    synchronize(device)
    seconds = time.perf_counter() - t0
    x = data[:batch]
    counter = FlopCounterMode(display=False)
    with counter, torch.autocast(device.type, dtype=torch.bfloat16, enabled=variant.bf16):
        model.pretrain_loss(x).backward()
    model.zero_grad(set_to_none=True)
    tail = torch.stack(losses[-max(1, steps // 10) :]).float().mean().item()
    return {
        "variant": variant.name,
        "batch": batch,
        "bf16": variant.bf16,
        "compiled": variant.compiled,
        "first_step_s": first,
        "ms_per_step": 1e3 * seconds / steps,
        "windows_per_s": batch * steps / seconds,
        "flop_per_step": counter.get_total_flops(),
        "loss_last_tenth": tail,
    }


def projected_hours(windows_per_s: float, windows: int = PAPER_WINDOWS, epochs: int = PAPER_EPOCHS) -> float:
    """Hours of ``epochs`` passes over ``windows`` at ``windows_per_s``."""
    return epochs * windows / windows_per_s / 3600


def report(rows: list[dict], peaks: dict, n_real_windows: int) -> None:
    fp32 = next((r for r in rows if r["variant"] == "fp32"), rows[0])
    print(
        f"\n{'variant':<20} {'batch':>5} {'ms/step':>8} {'windows/s':>10} {'TFLOP/s':>8} {'MFU spec':>8} "
        f"{'MFU meas':>8} {'vs fp32':>7} {'loss':>7} {'1st step':>8} {'paper 5 ep':>10} {'file 5 ep':>9}"
    )
    for r in rows:
        achieved = r["flop_per_step"] / (r["ms_per_step"] / 1e3)
        r["tflop_per_s"] = achieved / 1e12
        r["mfu_spec"] = achieved / peaks["spec_bf16"] if peaks["spec_bf16"] else None
        r["mfu_measured"] = achieved / (peaks["bf16"] if r["bf16"] else peaks["fp32"])
        r["speedup_vs_fp32"] = r["windows_per_s"] / fp32["windows_per_s"]
        r["paper_hours"] = projected_hours(r["windows_per_s"])
        r["file_hours"] = projected_hours(r["windows_per_s"], n_real_windows)
        spec = f"{r['mfu_spec']:>8.1%}" if r["mfu_spec"] is not None else f"{'-':>8}"
        print(
            f"{r['variant']:<20} {r['batch']:>5} {r['ms_per_step']:>8.2f} {r['windows_per_s']:>10,.0f} "
            f"{r['tflop_per_s']:>8.2f} {spec} {r['mfu_measured']:>8.1%} {r['speedup_vs_fp32']:>6.2f}x "
            f"{r['loss_last_tenth']:>7.4f} {r['first_step_s']:>7.1f}s {r['paper_hours']:>9.1f}h {r['file_hours']:>8.1f}h"
        )
    print(
        f"paper 5 ep: {PAPER_EPOCHS} epochs over the paper's {PAPER_WINDOWS / 1e6:.1f} M windows; file 5 ep: over the "
        f"real file's {n_real_windows / 1e6:.2f} M complete windows through 2022; MFU spec: against the datasheet's "
        "dense bf16 peak; MFU meas: against the matmul measured above (bf16 or fp32 as the variant); loss: the mean "
        "pretraining loss of the last tenth of the timed steps"
    )


def complete(log_close: np.ndarray, log_volume: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ticker's complete windows: log prices [n, 65] and log volumes [n, 64] (interval k: its right knot's day's
    volume, as the pipeline's windows), every value finite."""
    if len(log_close) < N_KNOTS:
        return np.empty((0, N_KNOTS)), np.empty((0, N_TOKENS))
    p = np.lib.stride_tricks.sliding_window_view(log_close, N_KNOTS)
    v = np.lib.stride_tricks.sliding_window_view(log_volume[1:], N_TOKENS)
    keep = np.isfinite(p).all(axis=1) & np.isfinite(v).all(axis=1)
    return p[keep], v[keep]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=REAL_FILE, help="bars: ticker, date, close, volume (parquet)")
    parser.add_argument("--tickers", type=int, default=64, help="names with the most sessions, tokenized")
    parser.add_argument("--steps", type=int, default=400, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps per variant before the timed ones")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=PAPER_BATCH, help="windows per step (the paper's 256)")
    parser.add_argument("--variants", default="fp32,bf16,bf16-compile,bf16-batch-x4", help=f"of {sorted(VARIANTS)}")
    parser.add_argument("--matmul", type=int, default=8192, help="side of the square matmul giving a measured peak")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--write-subset", type=Path, help="write the chosen tickers' bars here and stop")
    args = parser.parse_args(argv)
    if args.write_subset:
        write_subset(args.file, args.write_subset, args.tickers)
        return {}
    unknown = sorted(set(args.variants.split(",")) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}: expected some of {sorted(VARIANTS)}")
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is fp32: TF32 would be a variant of its own
    t0 = time.perf_counter()
    windows = spline_windows(read_bars(args.file, args.tickers))
    n_file = sum(len(complete(p, v)[0]) for p, v in read_bars(args.file).values())
    print(
        f"{len(windows):,} spline windows of {args.tickers} tickers tokenized and normalized in "
        f"{time.perf_counter() - t0:.1f} s ({windows.nbytes / 1e9:.2f} GB float32); the file holds {n_file:,}"
    )
    data = torch.from_numpy(windows).to(device)
    name, spec = spec_peak(device)
    peaks = {
        "spec_bf16": spec,
        "fp32": matmul_peak(device, torch.float32, args.matmul),
        "bf16": matmul_peak(device, torch.bfloat16, args.matmul),
    }
    total, _ = count_parameters(paper_model(device))
    print(
        f"device {name}: measured {args.matmul}^3 matmul fp32 {peaks['fp32'] / 1e12:.1f} TFLOP/s, bf16 "
        f"{peaks['bf16'] / 1e12:.1f} TFLOP/s; datasheet bf16 "
        + (f"{spec / 1e12:.1f} TFLOP/s" if spec else "unknown")
        + f"; SplineGPT {total / 1e6:.2f} M parameters (paper {PAPER_PARAMETERS / 1e6:.1f} M)"
    )
    rows = []
    for key in args.variants.split(","):
        rows.append(measure(VARIANTS[key], data, args.batch, args.steps, args.warmup, args.seed))
        print(f"  {key}: {rows[-1]['ms_per_step']:.2f} ms/step, {rows[-1]['windows_per_s']:,.0f} windows/s")
    report(rows, peaks, n_file)
    result = {
        "device": name,
        "parameters": total,
        "windows": len(windows),
        "file_windows": n_file,
        "peaks": peaks,
        "steps": args.steps,
        "warmup": args.warmup,
        "rows": rows,
        "seconds": time.perf_counter() - t0,
    }
    print(f"done in {result['seconds']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
