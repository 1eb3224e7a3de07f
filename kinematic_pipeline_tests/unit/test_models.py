"""Model code: parameter budget, RoPE, causality, LoRA freezing, overfitting, round trips, PatchTST."""

from __future__ import annotations

import dataclasses
import math

import peft
import pytest
import torch

from kinematic_pipeline.config import GPTConfig, profile_settings
from kinematic_pipeline.models import (
    KinematicGPT,
    PatchTST,
    PatchTSTClassifier,
    SequenceClassifier,
    build_model,
    count_parameters,
    inject_lora,
    lora_target_modules,
)
from kinematic_pipeline.models.gpt import apply_rotary, rotary_cos_sin
from kinematic_pipeline.models.heads import for_inference
from kinematic_pipeline.tasks.buy_sell_hold import weighted_cross_entropy
from kinematic_pipeline.variants import VARIANTS

MODELS = profile_settings("ci").model
CI, CI_PATCH = MODELS.gpt, MODELS.patchtst
TINY = dataclasses.replace(CI, d_model=32, n_layers=2, n_heads=4, d_ff=64, context=16, dropout=0.0)


def _tokens(batch: int = 4, length: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, length, 9, generator=torch.Generator().manual_seed(seed))


def _trained_lora_classifier(cfg: GPTConfig) -> tuple[peft.PeftModel, dict[str, torch.Tensor]]:
    """A LoRA classifier after a few optimizer steps, and the backbone weights it started from."""
    torch.manual_seed(0)
    backbone = KinematicGPT(cfg).eval()
    base_state = {k: v.clone() for k, v in backbone.state_dict().items()}
    model = inject_lora(SequenceClassifier(backbone, 3), rank=4, alpha=8, dropout=0.0)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    x, labels = _tokens(8, 16), torch.tensor([0, 1, 2, -1, 0, 1, 2, 1])
    for _ in range(3):
        opt.zero_grad()
        weighted_cross_entropy(model(x), labels).backward()
        opt.step()
    return model.eval(), base_state


def test_paper_gpt_variants_have_12_6_million_parameters():
    cfg = profile_settings("paper").model
    counts = {name: count_parameters(build_model(name, cfg)) for name, v in VARIANTS.items() if v.backbone == "gpt"}
    for variant, (total, trainable) in counts.items():
        assert abs(total - 12.6e6) <= 0.2e6, (variant, total)
        assert trainable == total
    assert len(counts) == 3 and len(set(counts.values())) == 1  # one backbone; only the tokens differ


def test_rope_attention_scores_depend_only_on_relative_position():
    head_dim, T = CI.d_model // CI.n_heads, 12
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(T, head_dim, generator=g), torch.randn(T, head_dim, generator=g)

    def scores(offset: int) -> torch.Tensor:
        cos, sin = rotary_cos_sin(torch.arange(T) + offset, head_dim, CI.rope_base)
        return apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).T  # (T, T)

    for offset in (1, 7, 40):
        torch.testing.assert_close(scores(offset), scores(0), atol=1e-4, rtol=1e-4)
    # ... yet the rotation is not the identity: the same q, k placed at other relative offsets score differently.
    assert not torch.allclose(scores(0), q @ k.T, atol=1e-2)
    cos, sin = rotary_cos_sin(torch.tensor([0, 3]), head_dim, CI.rope_base)
    rq, rk = apply_rotary(q[:2], cos, sin), apply_rotary(k[:2], cos, sin)
    assert not torch.isclose(rq[0] @ rk[1], scores(0)[0, 1], atol=1e-2)  # distance 3 vs distance 1


def test_rope_is_what_makes_the_gpt_see_token_order():
    torch.manual_seed(0)
    # One block: its last position attends to the set of past tokens themselves (deeper blocks would
    # attend to causal summaries, which order changes even without positions).
    model = KinematicGPT(dataclasses.replace(TINY, n_layers=1)).eval()
    x = _tokens(2, 16)
    swapped = x.clone()
    swapped[:, [2, 9]] = x[:, [9, 2]]  # reorder two past tokens; the last token stays put
    with torch.no_grad():
        assert not torch.allclose(model(x)[:, -1], model(swapped)[:, -1], atol=1e-5)
        # Without the rotation, causal attention over the prefix is a set operation: order is invisible.
        model.rope_cos.fill_(1.0)
        model.rope_sin.fill_(0.0)
        torch.testing.assert_close(model(x)[:, -1], model(swapped)[:, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("t", [0, 20, 62])
def test_gpt_outputs_do_not_change_when_future_tokens_change(t):
    torch.manual_seed(0)
    model = KinematicGPT(CI).eval()
    x = _tokens(3, 64)
    future_changed = x.clone()
    future_changed[:, t + 1 :] = torch.randn_like(x[:, t + 1 :]) * 5
    with torch.no_grad():
        for fn in (model.forward, model.hidden):
            a, b = fn(x), fn(future_changed)
            torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-6, rtol=0)
            assert not torch.allclose(a[:, t + 1], b[:, t + 1])
        # the classifier's read of a window ending at t sees nothing after t
        a, b = model.last_hidden(x[:, : t + 1]), model.last_hidden(future_changed[:, : t + 1])
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_last_hidden_is_the_last_position_of_hidden_and_its_gradients_too():
    """The classifier's path (the last block run for the last position alone) against the obviously correct one
    (every position through every block, then the last taken), forward and backward, with LoRA injected."""
    torch.manual_seed(0)
    backbone = KinematicGPT(CI).eval()
    x = _tokens(5, 64)
    with torch.no_grad():
        torch.testing.assert_close(backbone.last_hidden(x), backbone.hidden(x)[:, -1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            backbone.last_hidden(x[:, :17]), backbone.hidden(x[:, :17])[:, -1], atol=1e-5, rtol=1e-5
        )
    model, _ = _trained_lora_classifier(CI)
    inner = model.base_model.model

    def grads(read) -> list[torch.Tensor]:
        model.zero_grad()
        logits = inner.cls_head(read(inner.backbone, x))
        weighted_cross_entropy(logits, torch.tensor([0, 1, 2, 1, 0])).backward()
        return [p.grad.clone() for p in model.parameters() if p.requires_grad]

    fast, slow = grads(lambda b, x: b.last_hidden(x)), grads(lambda b, x: b.hidden(x)[:, -1])
    assert len(fast) == len(slow) > 0
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_lora_trains_only_adapters_and_head_and_leaves_the_base_bit_identical():
    model, base_state = _trained_lora_classifier(CI)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "cls_head.modules_to_save" in n for n in trainable)
    assert any("cls_head" in n for n in trainable)
    # Exactly the paper's layers 1, 2 and 4 carry adapters, on all four linears of each.
    adapted = {n.split(".lora_")[0].removeprefix("base_model.model.") for n in trainable if "lora_" in n}
    assert adapted == {f"backbone.{m}" for m in lora_target_modules(CI, (0, 1, 3))}

    backbone = model.base_model.model.backbone
    for name, value in backbone.state_dict().items():
        if "lora_" in name:
            continue
        assert torch.equal(value, base_state[name.replace(".base_layer", "")]), name
    lora_b = backbone.blocks[0].attn.qkv.lora_B["default"].weight
    assert lora_b.abs().sum() > 0  # initialized at zero, so it moved
    head = model.base_model.model.cls_head
    assert not torch.equal(head.modules_to_save["default"].weight, head.original_module.weight)


def test_for_inference_merges_lora_into_a_copy_with_the_same_probabilities():
    model, _ = _trained_lora_classifier(CI)
    x = _tokens(6, 64)
    with torch.no_grad():
        before = model(x)
        merged = for_inference(model)
        torch.testing.assert_close(merged(x), before, atol=1e-5, rtol=1e-5)
        assert not any("lora_" in n for n, _ in merged.named_parameters())  # one product per layer
        torch.testing.assert_close(model(x), before, atol=0, rtol=0)  # the argument is left as it was
    assert any("lora_" in n for n, _ in model.named_parameters())


def test_lora_target_modules_name_the_paper_layers():
    names = lora_target_modules(profile_settings("paper").model.gpt)
    assert names[:4] == ["blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc", "blocks.0.mlp.proj"]
    assert {n.split(".")[1] for n in names} == {"0", "1", "3"} and len(names) == 12
    with pytest.raises(ValueError, match="outside"):
        lora_target_modules(CI, layers=(4,))


def test_weighted_cross_entropy_weights_classes_and_ignores_unknown_labels():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [0.0, 0.0, 3.0], [9.0, -9.0, 0.0]])
    labels = torch.tensor([0, 1, 2, -1])
    w = (2.0, 10.0, 1.0)
    logp = torch.log_softmax(logits, dim=1)
    expected = -(w[0] * logp[0, 0] + w[1] * logp[1, 1] + w[2] * logp[2, 2]) / sum(w)
    torch.testing.assert_close(weighted_cross_entropy(logits, labels, w), expected)
    empty = weighted_cross_entropy(logits, torch.full((4,), -1))
    assert empty.item() == 0.0 and not math.isnan(empty.item())


def test_tiny_gpt_overfits_a_tiny_batch():
    torch.manual_seed(0)
    model = KinematicGPT(TINY)
    t = torch.arange(TINY.context, dtype=torch.float32)
    phase = torch.rand(8, 1, 9) * 2 * math.pi
    freq = 0.2 + 0.3 * torch.rand(8, 1, 9)
    x = torch.sin(freq * t[None, :, None] + phase)  # (8, T, 9) smooth, predictable channels
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def loss() -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(x)[:, :-1], x[:, 1:])  # output t predicts token t+1

    first = loss().item()
    for _ in range(300):
        opt.zero_grad()
        step_loss = loss()
        step_loss.backward()
        opt.step()
    assert loss().item() < first / 10, (first, loss().item())


def test_gpt_checkpoint_round_trips(tmp_path):
    torch.manual_seed(0)
    model = KinematicGPT(CI).eval()
    torch.save(model.state_dict(), tmp_path / "gpt.pt")
    torch.manual_seed(1)
    fresh = KinematicGPT(CI).eval()
    x = _tokens()
    assert not torch.equal(fresh(x), model(x))
    fresh.load_state_dict(torch.load(tmp_path / "gpt.pt", weights_only=True))
    assert torch.equal(fresh(x), model(x))


def test_lora_adapter_round_trips_through_peft_save_and_load(tmp_path):
    model, base_state = _trained_lora_classifier(CI)
    model.save_pretrained(tmp_path / "adapter")
    backbone = KinematicGPT(CI)
    backbone.load_state_dict(base_state)
    loaded = peft.PeftModel.from_pretrained(SequenceClassifier(backbone, 3), tmp_path / "adapter").eval()
    x = _tokens(5, 64, seed=3)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
        assert not torch.allclose(SequenceClassifier(KinematicGPT(CI), 3).eval()(x), model(x))


def test_patchtst_encodes_eight_patches_per_channel_and_is_window_scale_invariant():
    cfg = profile_settings("paper").model.patchtst
    model = PatchTST(CI_PATCH).eval()
    assert PatchTST(cfg).n_patches == 8  # 64 points, patch 16, stride 8, end padding
    x = torch.randn(3, 64, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        z = model.encode(x)
        assert z.shape == (3, 2, 8, CI_PATCH.d_model)
        # RevIN: a window's level and scale (per channel) do not reach the encoder.
        torch.testing.assert_close(model.encode(3.0 * x + 5.0), z, atol=1e-4, rtol=1e-4)
        # Channel independence: channel 0's embeddings ignore channel 1.
        other = x.clone()
        other[..., 1] = torch.randn(3, 64)
        torch.testing.assert_close(model.encode(other)[:, 0], z[:, 0])


def test_patchtst_pretrain_loss_is_finite_and_falls_on_a_tiny_batch():
    torch.manual_seed(0)
    model = PatchTST(CI_PATCH)
    t = torch.arange(64, dtype=torch.float32)
    x = torch.stack([torch.sin(0.3 * t + p) for p in torch.rand(8, 2).flatten() * 6]).view(8, 2, 64).transpose(1, 2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    first = model.pretrain_loss(x, generator=torch.Generator().manual_seed(123)).item()
    assert math.isfinite(first)
    for _ in range(150):
        opt.zero_grad()
        model.pretrain_loss(x, generator=g).backward()
        opt.step()
    last = model.pretrain_loss(x, generator=torch.Generator().manual_seed(123)).item()
    assert last < first / 2, (first, last)


def test_patchtst_classifier_probes_a_frozen_backbone():
    backbone = PatchTST(CI_PATCH)
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    clf = PatchTSTClassifier(backbone, 3).train()
    assert not backbone.training  # the probe never runs the encoder with dropout
    assert all(not p.requires_grad for p in clf.backbone.parameters())
    assert count_parameters(clf)[1] == 2 * CI_PATCH.d_model * 3 + 3  # the linear probe only
    x = torch.randn(4, 64, 2)
    opt = torch.optim.Adam([p for p in clf.parameters() if p.requires_grad], lr=1e-2)
    logits = clf(x)
    assert logits.shape == (4, 3)
    weighted_cross_entropy(logits, torch.tensor([0, 1, 2, 1])).backward()
    opt.step()
    assert all(torch.equal(v, before[k]) for k, v in backbone.state_dict().items())


def test_build_model_rejects_an_unknown_variant():
    assert isinstance(build_model("patchtst", MODELS), PatchTST)
    assert isinstance(build_model("rawgpt_fd", MODELS), KinematicGPT)
    with pytest.raises(ValueError, match="expected one of splinegpt, patchtst, rawgpt_fd, rawgpt"):
        build_model("lstm", MODELS)


def test_build_model_passes_each_backbone_its_own_config():
    assert build_model("splinegpt", MODELS).cfg is MODELS.gpt
    assert build_model("patchtst", MODELS).cfg is MODELS.patchtst
    with pytest.raises(ValueError, match="backbone 'lstm': expected one of 'gpt', 'patchtst'"):
        MODELS.of("lstm")


@pytest.mark.parametrize("horizon", [1, 5])
def test_gpt_pretraining_target_is_the_token_horizon_ahead(horizon):
    """The objective against its slow twin: every position t < T - h, every channel, squared error against token t + h,
    averaged; h = 1 is the paper's next token."""
    torch.manual_seed(0)
    model = KinematicGPT(dataclasses.replace(CI, pretrain_horizon=horizon)).eval()
    x = _tokens(3, 64)
    with torch.no_grad():
        pred = model(x)
        errors = [
            float((pred[b, t, c] - x[b, t + horizon, c]) ** 2)
            for b in range(3)
            for t in range(64 - horizon)
            for c in range(9)
        ]
        assert model.pretrain_loss(x).item() == pytest.approx(sum(errors) / len(errors), rel=1e-5)
    with pytest.raises(ValueError, match="pretrain_horizon"):
        dataclasses.replace(CI, pretrain_horizon=64)
