"""models/dropout.py: the CPU dropout mask drawn with `random_` keeps nn.Dropout's semantics."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from models import attention
from models.attention import MultiHeadAttention
from models.dropout import Dropout
from models.encodings.base import Positions


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_drops_a_fraction_p_and_scales_the_rest_like_nn_dropout(p):
    torch.manual_seed(0)
    x = torch.rand(1_000_000) + 1.0                                      # no zeros of its own
    drop = Dropout(p).train()
    y = drop(x)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < 5 * (p * (1 - p) / x.numel()) ** 0.5      # within 5 standard errors
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))              # nn.Dropout's 1 / (1 - p) scaling
    assert isinstance(drop, nn.Dropout) and drop.p == p and not dict(drop.state_dict())


def test_the_gradient_is_the_same_mask():
    torch.manual_seed(3)
    x = torch.randn(64, 20, 16, requires_grad=True)
    y = Dropout(0.3).train()(x)
    y.backward(torch.ones_like(y))
    mask = torch.where(y != 0, 1 / 0.7, 0.0)
    torch.testing.assert_close(x.grad, mask)


def test_seeded_masks_repeat_and_do_not_depend_on_the_thread_count():
    x = torch.randn(32, 50, 64)
    threads = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 1):
            torch.set_num_threads(n)
            torch.manual_seed(7)
            outs.append(Dropout(0.5).train()(x))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    torch.manual_seed(8)
    assert not torch.equal(outs[0], Dropout(0.5).train()(x))            # another seed, another mask


def test_eval_mode_and_p_zero_pass_the_input_through():
    x = torch.randn(8, 5)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))    # nn.Dropout's p = 1


def test_cpu_training_attention_draws_its_mask_here_not_in_sdpa(monkeypatch):
    """On the CPU with dropout > 0 the attention takes the explicit path (this module's mask); with
    dropout 0 or in eval it stays on torch's SDPA. Both give the same attention without dropout."""
    calls = []
    real = attention.F.scaled_dot_product_attention
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(k.get("dropout_p")) or real(*a, **k))
    torch.manual_seed(0)
    seqs = torch.tensor([[0, 0, 3, 4, 5], [1, 2, 3, 4, 5]])
    pos = Positions.from_seqs(seqs)
    x = torch.randn(2, 5, 16)
    mha = MultiHeadAttention(16, 2, dropout=0.4)
    mha.train()(x, pos)
    assert calls == []                                                  # explicit path, Dropout's mask
    out_eval = mha.eval()(x, pos)
    assert calls == [0.0]                                               # SDPA again
    monkeypatch.setattr(attention, "SDPA", False)
    torch.testing.assert_close(mha(x, pos), out_eval)                   # explicit == SDPA without dropout


def test_the_switch_gives_back_aten_dropout(monkeypatch):
    import models.dropout
    x = torch.randn(16, 30)
    torch.manual_seed(5)
    aten = nn.Dropout(0.3).train()(x)
    torch.manual_seed(5)
    assert not torch.equal(Dropout(0.3).train()(x), aten)               # another sampler, another mask
    monkeypatch.setattr(models.dropout, "FAST_CPU", False)
    torch.manual_seed(5)
    assert torch.equal(Dropout(0.3).train()(x), aten)
