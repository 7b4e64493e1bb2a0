"""The GPU paths: every neural model, its loss and gradients, full-ranking evaluation and a whole
`seqpe train` run agree between CPU and CUDA. Skipped where no CUDA device is (CI); run on a
GPU machine with `pytest -m cuda`."""
from __future__ import annotations

import copy
import json

import pytest
import torch

from models import MODELS, build_model
from models.encodings import build_encoding
from pipeline import train as stage
from pipeline.params import TrainParams
from test_models import DEFAULT_ENCODING, NEURAL, NO_DROPOUT, SEQS
from test_train import make_samples, params, untrained_sasrec_and_test_split

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

N_ITEMS = 40
TP = TrainParams(dim=16, layers=2, heads=2, dropout=0.0, max_len=9)
TARGETS = torch.tensor([3, 4, 7, 1])


def twins(name: str):
    """The same freshly initialised model on the CPU and on the GPU (a copy of its weights)."""
    torch.manual_seed(0)
    enc = None
    if MODELS[name].uses_encoding:
        enc = build_encoding(DEFAULT_ENCODING[name], dim=TP.dim, max_len=TP.max_len, heads=TP.heads,
                             layers=TP.layers)
    cpu = build_model(name, n_items=N_ITEMS, max_len=TP.max_len, train=TP, options=NO_DROPOUT.get(name, {}),
                      encoding=enc)
    return cpu, copy.deepcopy(cpu).cuda()


@pytest.mark.parametrize("name", NEURAL)
def test_scores_agree(name):
    cpu, gpu = twins(name)
    with torch.no_grad():
        a = cpu.eval()(SEQS)[:, 1:]
        b = gpu.eval()(SEQS.cuda())[:, 1:].cpu()
    assert torch.allclose(a, b, atol=1e-3, rtol=1e-3), (a - b).abs().max()   # cuDNN GRUs: TF32


@pytest.mark.parametrize("name", NEURAL)
def test_loss_and_gradients_agree(name):
    cpu, gpu = twins(name)
    g = torch.Generator().manual_seed(0)
    losses, grads = [], []
    for net, dev in ((cpu, "cpu"), (gpu, "cuda")):
        net.train()
        if MODELS[name].side:   # no dot-product head (CARCA): its own objective, the same negatives on both
            loss = net.training_loss(SEQS.to(dev), TARGETS.to(dev), torch.Generator().manual_seed(0))
        else:
            loss = stage.loss_fn(net, SEQS.to(dev), TARGETS.to(dev), TP, N_ITEMS, g)
        loss.backward()
        losses.append(loss.item())
        grads.append({k: p.grad.detach().cpu() for k, p in net.named_parameters() if p.grad is not None})
    assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-5)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for k in grads[0]:
        assert torch.allclose(grads[0][k], grads[1][k], atol=1e-4, rtol=1e-3), k


@pytest.mark.parametrize("mask_history", [False, True])
def test_full_ranking_metrics_agree(tmp_path, mask_history):
    net, data = untrained_sasrec_and_test_split(tmp_path)
    cpu = stage.score(net, data, "test", [1, 5, 10], 16, torch.device("cpu"), mask_history=mask_history)
    gpu = stage.score(net.cuda(), data, "test", [1, 5, 10], 16, torch.device("cuda"), mask_history=mask_history)
    assert cpu.keys() == gpu.keys() and cpu == pytest.approx(gpu, abs=1e-6)


def test_whole_run_on_the_gpu_learns_and_records_it(tmp_path):
    samples = make_samples(tmp_path / "samples", n_items=30)
    out = {}
    for device in ("cpu", "cuda"):
        p = params(model="sasrec", encoding="lpe", device=device, epochs=3, patience=0, layers=1)
        [res] = stage.run("toyset", samples, tmp_path / device, p, progress=False)
        out[device] = json.loads((tmp_path / device / res["name"] / "run.json").read_text())
    assert out["cuda"]["device"] == "cuda" and out["cpu"]["device"] == "cpu"
    assert out["cuda"]["test"]["hr@5"] > 0.9                       # the `next = item + 1` rule is learnt
    # same seed and data: the GPU run follows the CPU run up to float summation order
    assert out["cuda"]["test"]["hr@5"] == pytest.approx(out["cpu"]["test"]["hr@5"], abs=0.05)
    assert [h["loss"] for h in out["cuda"]["history"]] == pytest.approx(
        [h["loss"] for h in out["cpu"]["history"]], rel=0.02)


@pytest.mark.parametrize("name, options", [("gru4rec", {"loss": "bpr_max", "negatives": 8}),
                                           ("gru4rec", {"loss": "top1_max", "negatives": 8}),
                                           ("bprmf", {"negatives": 3}), ("fpmc", {"negatives": 3})])
def test_own_training_losses_agree(name, options):
    """Recommender.training_loss: negatives drawn from a CPU generator, scored on either device."""
    torch.manual_seed(0)
    cpu = build_model(name, n_items=N_ITEMS, max_len=TP.max_len, train=TP, options=options, encoding=None)
    gpu = copy.deepcopy(cpu).cuda()
    losses = []
    for net, dev in ((cpu, "cpu"), (gpu, "cuda")):
        net.train()
        losses.append(net.training_loss(SEQS.to(dev), TARGETS.to(dev), torch.Generator().manual_seed(0)).item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-3, abs=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("impl, package", [("plain", None), ("chunked", None), ("cce", "cut_cross_entropy"),
                                           ("liger", "liger_kernel")])
def test_every_loss_implementation_trains_at_every_precision(tmp_path, impl, package, precision):
    """A whole run with each train.ce_impl at each train.precision learns the rule. An fp32 run with cce
    failed at its first backward on an H100 (the kernel takes bf16 only): it is now cast for it."""
    if package:
        pytest.importorskip(package)
    samples = make_samples(tmp_path / "samples", n_items=30)
    p = params(model="sasrec", encoding="lpe", device="cuda", epochs=3, patience=0, layers=1, ce_impl=impl,
               precision=precision)
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    record = json.loads((tmp_path / "runs" / res["name"] / "run.json").read_text())
    assert record["train"]["ce_impl"] == impl and record["train"]["precision"] == precision
    assert record["test"]["hr@5"] > 0.9
    assert torch.get_float32_matmul_precision() == "highest"           # tf32's setting is put back after the run


def test_reduce_overhead_trains_posrec_as_eager_does(tmp_path):
    """train.compile: reduce-overhead (captured CUDA graphs, static session graphs, widths in multiples of
    8) follows the eager run's losses and metrics up to float summation order."""
    samples = make_samples(tmp_path / "samples", n_items=30)
    out = {}
    for mode in (False, "reduce-overhead"):
        p = params(model="posrec", encoding="ldpe", device="cuda", epochs=3, patience=0, max_len=12, compile=mode)
        [res] = stage.run("toyset", samples, tmp_path / str(mode), p, progress=False)
        out[mode] = json.loads((tmp_path / str(mode) / res["name"] / "run.json").read_text())
    eager, graphs = out[False], out["reduce-overhead"]
    assert graphs["train"]["compile"] == "reduce-overhead" and graphs["test"]["hr@5"] > 0.5
    assert [h["loss"] for h in graphs["history"]] == pytest.approx([h["loss"] for h in eager["history"]], rel=1e-3)
    assert graphs["test"]["hr@5"] == pytest.approx(eager["test"]["hr@5"], abs=0.02)


def test_tf32_products_are_tf32_inside_the_block_and_fp32_after():
    """train.precision tf32 changes the GPU's products (TF32's 10-bit mantissa: errors far above fp32's) within
    the training steps' block, and fp32 products come back after it (valid / test are scored in fp32)."""
    from pipeline.train.setup import matmul_precision
    gen = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(512, 512, device="cuda", generator=gen) for _ in range(2))
    exact = a.double() @ b.double()
    before = a @ b
    with matmul_precision(TrainParams(precision="tf32"), torch.device("cuda")):
        inside = a @ b
    after = a @ b
    assert torch.equal(before, after)
    fp32_error, tf32_error = ((x.double() - exact).abs().max().item() for x in (before, inside))
    assert tf32_error > 10 * fp32_error, (tf32_error, fp32_error)
