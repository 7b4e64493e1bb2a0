"""Dropout whose CPU mask comes from torch's integer sampler instead of `bernoulli_`.

Why not plain `nn.Dropout`: on the CPU, aten's dropout draws its mask with `bernoulli_`, which takes
about 20 ns per element there (6.2 ms for a 128 x 50 x 50 tensor on one thread of this project's
AMD EPYC machine, torch 2.13.0+cpu, against 0.9 ms for `random_()` on int32). In the SASRec step
`seqpe train` runs with dropout 0.5 (Kang & McAuley's settings on Beauty) the nine masks were 24% of
the step, and the step is 1.22x faster with this module (bench/results/train.md, "Session 10", CPU
dropout masks). Here the mask is

    keep = (r >= round(p * 2^31)),   r uniform on [0, 2^31) from int32 `random_()`

so an element is kept with probability 1 - p (to within 2^-31) and kept values are scaled by
1 / (1 - p), as `nn.Dropout` does; the backward pass multiplies by the same mask (autograd of the
product). The draws come from torch's default CPU generator, so `torch.manual_seed` fixes them and
the thread count does not change them. On any other device (CUDA's dropout is a fused Philox
kernel), in eval mode and at p = 0 this is exactly `nn.Dropout`.

It subclasses `nn.Dropout` (same `p`, `inplace`, repr and empty state dict), so checkpoints and
code that reads `.p` see no difference. The masks differ from `bernoulli_`'s, so CPU runs trained
with dropout before this change do not repeat bit for bit; the run fingerprint hashes the code
(pipeline/versions.py), so finished seeds are retrained rather than mixed.
"""
from __future__ import annotations

import torch
from torch import nn

_SCALE = 2 ** 31
FAST_CPU = True     # module switch: False makes every Dropout plain nn.Dropout (benchmark A/B, debugging)


def fast_on(device: torch.device) -> bool:
    """Whether training masks on `device` come from `keep_mask` (the CPU, unless switched off)."""
    return FAST_CPU and device.type == "cpu"


def keep_mask(shape: torch.Size, p: float, dtype: torch.dtype) -> torch.Tensor:
    """(shape) float mask on the CPU: 0 with probability p, else 1 / (1 - p)."""
    r = torch.empty(shape, dtype=torch.int32).random_()                 # uniform on [0, 2^31)
    return (r >= round(p * _SCALE)).to(dtype).mul_(1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or self.p >= 1.0 or not fast_on(x.device) \
                or not x.is_floating_point():
            return super().forward(x)
        mask = keep_mask(x.shape, self.p, x.dtype)
        return x.mul_(mask) if self.inplace else x * mask
