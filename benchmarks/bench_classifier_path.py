"""The GPT classifier's two hot paths on the `real` profile's backbone (d_model 64, 4 blocks, LoRA on layers 0, 1, 3),
each against its reference measured in the same run, one process at ``--threads`` threads (1: what a training
process does beside another on two cores):

  * a fine-tuning step (batch 128, weighted cross entropy, AdamW on the adapters and the head): every position
    through every block and the last taken (``hidden(x)[:, -1]``, the reference) against the last block run for the
    last position alone (``last_hidden``, what ``SequenceClassifier`` runs);
  * prediction (windows per second of forward passes): the PEFT model unmerged at batches of 512 (the reference: what
    ``stages/predict.py`` ran before) against LoRA merged into a copy (``heads.for_inference``) at batches of 64 to
    512; the largest difference of the logits is reported beside.

Windows are N(0, 1) in the model's input shape (a step's cost does not depend on the values); ``--repeats`` rounds
alternate the two sides, and each side's best round is kept (noise on a shared machine only slows a round down).

    python benchmarks/bench_classifier_path.py [--threads 1] [--steps 15] [--windows 4096] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _classifier():
    import torch

    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.models import KinematicGPT, SequenceClassifier, inject_lora

    settings = load_settings("demo", env={})  # the real profile's backbone and LoRA (no source file needed)
    train = settings.train
    torch.manual_seed(0)
    backbone = KinematicGPT(settings.model.gpt)
    model = inject_lora(SequenceClassifier(backbone, 3), train.lora_rank, train.lora_alpha, 0.0, train.lora_layers)
    with torch.no_grad():  # LoRA's B starts at zero: move it, so that merging it changes the weights it merges into
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.02)
    return model, train


def _best_seconds(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def fine_tuning(steps: int, repeats: int) -> list[dict]:
    import torch

    from kinematic_pipeline.tasks.buy_sell_hold import weighted_cross_entropy

    model, train = _classifier()
    inner = model.base_model.model
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=train.finetune_lr)
    x = torch.randn(train.batch_size, model.base_model.model.backbone.cfg.context, 9)
    y = torch.randint(0, 3, (train.batch_size,), generator=torch.Generator().manual_seed(0))
    paths = {
        "every position (hidden()[:, -1])": lambda b: b.hidden(x)[:, -1],
        "last position (last_hidden)": lambda b: b.last_hidden(x),
    }

    def run(read) -> None:
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            weighted_cross_entropy(inner.cls_head(read(inner.backbone)), y, train.class_weights).backward()
            optimizer.step()

    for read in paths.values():
        run(read)  # warm-up
    seconds = {name: float("inf") for name in paths}
    for _ in range(repeats):  # alternate the sides: a slow stretch of the machine hits both
        for name, read in paths.items():
            seconds[name] = min(seconds[name], _best_seconds(lambda read=read: run(read), 1))
    reference = seconds[next(iter(paths))]
    return [{"path": name, "ms_per_step": 1000 * s / steps, "speedup": reference / s} for name, s in seconds.items()]


def prediction(windows: int, repeats: int) -> list[dict]:
    import torch

    from kinematic_pipeline.models.heads import for_inference

    model, _ = _classifier()
    model.eval()
    merged = for_inference(model)
    x = torch.randn(windows, model.base_model.model.backbone.cfg.context, 9)

    def forward(m, batch: int) -> torch.Tensor:
        with torch.inference_mode():
            return torch.cat([m(x[i : i + batch]) for i in range(0, windows, batch)])

    reference_logits = forward(model, 512)
    sides = [("PEFT unmerged", model, 512)] + [("LoRA merged", merged, b) for b in (64, 128, 256, 512)]
    seconds = {(name, b): float("inf") for name, _, b in sides}
    for _ in range(repeats):
        for name, m, b in sides:
            seconds[(name, b)] = min(seconds[(name, b)], _best_seconds(lambda m=m, b=b: forward(m, b), 1))
    reference = seconds[("PEFT unmerged", 512)]
    return [
        {
            "model": name,
            "batch": b,
            "windows_per_s": windows / seconds[(name, b)],
            "speedup": reference / seconds[(name, b)],
            "max_abs_logit_diff": float((forward(m, b) - reference_logits).abs().max()),
        }
        for name, m, b in sides
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=15, help="fine-tuning steps a round")
    parser.add_argument("--windows", type=int, default=4096, help="windows predicted a round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    out = {
        "threads": args.threads,
        "fine_tuning": fine_tuning(args.steps, args.repeats),
        "prediction": prediction(args.windows, args.repeats),
    }
    for row in out["fine_tuning"]:
        print(f"fine-tuning step, {row['path']:34s} {row['ms_per_step']:7.1f} ms  {row['speedup']:.2f}x")
    for row in out["prediction"]:
        print(
            f"prediction, {row['model']:13s} batch {row['batch']:3d}  {row['windows_per_s']:7.0f} windows/s  "
            f"{row['speedup']:.2f}x  (logits within {row['max_abs_logit_diff']:.1e})"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
