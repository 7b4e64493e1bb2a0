"""`seqpe encodings inspect`: draw an encoding so its awareness can be seen (000 §5.5).

Notation used for tensor shapes:
    l  session length, m  table width (D for additive encodings)

For an encoding with a per-item table P^l (models/encodings/base.py `table`):
    NAME-matrix-L{l}.png        P^l itself, one row per position            (000 Figs. 7-8)
    NAME-dot-L{l}.png           P^l (P^l)^T, same length                    (000 Fig. 9)
    NAME-dot-L{a}xL{b}.png      P^a (P^b)^T, two lengths                    (000 Fig. 10; 11-12 learned)
For every encoding (relative ones have no table):
    NAME-attention-L{l}.png     attention weights of one content-free query/key vector
                                repeated at every position (block 1): the positional pattern
Learned encodings come from a trained run's checkpoint.pt when given (its "model" state
dict and "config"), else from their seeded initialisation.

Inputs are bounded before anything is built (`check_inputs`): a length is at most MAX_LENGTH
(a dot-product map is l x l: 100,000 positions would be a 40 GB matrix, and a figure of 600 pixels
cannot show more than a few hundred rows anyway), at most MAX_LENGTHS distinct lengths (every pair
gets a figure), and a width of 1..MAX_DIM.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Optional

import torch

from pipeline.errors import DataError, ParamsError
from pipeline.io import atomic_path, refuse_nested

from . import build_encoding, get_spec
from .base import Positions, allowed_keys


MAX_LENGTH = 1024      # positions per figure
MAX_LENGTHS = 8        # distinct lengths (8 give 28 pair figures)
MAX_DIM = 4096         # encoding width without --run


def check_inputs(lengths: list[int], dim: int) -> None:
    """One-line ParamsError for lengths or a width that cannot make a useful figure (see the module
    docstring), before anything is allocated."""
    if not lengths or min(lengths) < 1:
        raise ParamsError(f"--lengths must be positive integers, got {lengths}", "pass e.g. --lengths 10 20")
    if max(lengths) > MAX_LENGTH:
        size = 4 * max(lengths) ** 2
        shown = f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"
        raise ParamsError(f"--lengths {max(lengths)} is longer than {MAX_LENGTH} positions (its l x l map is "
                          f"{max(lengths) ** 2:,} cells, {shown} of floats: more than a figure's pixels can show)",
                          f"pass lengths up to {MAX_LENGTH}, e.g. --lengths 10 20 50")
    if len(set(lengths)) > MAX_LENGTHS:
        raise ParamsError(f"--lengths gives {len(set(lengths))} distinct lengths; at most {MAX_LENGTHS} are drawn "
                          "(every pair gets a figure)", "pass fewer lengths")
    if not 1 <= dim <= MAX_DIM:
        raise ParamsError(f"--dim must be in 1..{MAX_DIM}, got {dim}", "pass e.g. --dim 100 (PosRec's width)")


def load_from_run(name: str, run_dir: Path):
    """The encoding of a trained run, with its learned weights; (encoding, dim, heads, max_len)."""
    from pipeline.train.runs import load_checkpoint
    ckpt = load_checkpoint(run_dir)
    cfg = ckpt["config"]
    from models import MODELS
    if getattr(MODELS.get(cfg.get("model")), "task", "next_item") == "ctr":
        raise DataError(f"{run_dir} is a CTR run: its encoding is built at the CTR backbone's widths (item and "
                        "category embeddings), which inspect does not rebuild", "pass a next-item run (srgnn or "
                        "leave-one-out data), or inspect the encoding's definition without --run")
    if not getattr(MODELS.get(cfg.get("model")), "uses_encoding", True):
        raise DataError(f"{run_dir} is a {cfg.get('model')} run, a model that takes no positional encoding",
                        "pass the run of a model trained with the encoding, or inspect its definition without --run")
    if cfg.get("encoding") != name:
        raise DataError(f"run {run_dir} was trained with encoding '{cfg.get('encoding')}', not '{name}'",
                        f"inspect {cfg.get('encoding')} or pass another run")
    tp = cfg["train"]
    enc = build_encoding(name, dim=tp["dim"], max_len=cfg["max_len"], heads=tp["heads"], layers=tp["layers"],
                         options=cfg.get("encoding_options", {}))
    own = enc.state_dict()
    if own:
        first = next(iter(own))
        prefixes = sorted(k[: -len(first)] for k in ckpt["model"] if k.endswith(first))
        prefix = next((p for p in prefixes if all(p + k in ckpt["model"] for k in own)), None)
        if prefix is None:
            raise DataError(f"checkpoint in {run_dir} holds no weights for encoding '{name}'",
                            "pass the run folder of a model trained with it")
        enc.load_state_dict({k: ckpt["model"][prefix + k] for k in own})
    return enc, tp["dim"], tp["heads"], cfg["max_len"]


def session(length: int) -> Positions:
    return Positions.from_mask(torch.ones(1, length, dtype=torch.bool))


def attention_pattern(enc, length: int, head_dim: int, heads: int = 1) -> torch.Tensor:
    """(l, l) weights of block 1 for one seeded vector used as every query and key."""
    g = torch.Generator().manual_seed(0)
    v = torch.randn(1, heads, 1, head_dim, generator=g).expand(1, heads, length, head_dim)  # (1, H, l, E)
    pos = session(length)
    q, k = enc.rotate(v, v, pos, 0)
    logits = q @ k.transpose(-1, -2) / head_dim ** 0.5                     # (1, H, l, l)
    bias = enc.bias(q, k, pos, 0, query_input=v.transpose(1, 2).flatten(2))   # the same vector as the item (1, l, D)
    logits = logits if bias is None else logits + bias
    probs = torch.softmax(logits.masked_fill(~allowed_keys(pos, length), float("-inf")), -1)
    return enc.weights(probs, pos, 0)[0, 0]                                 # (l, l)


MARK = "seqpe encodings inspect"         # the PNGs' Software text: a later call may replace its own figures only


def _ours(path: Path) -> bool:
    """A PNG this command wrote (its Software text chunk), which a new call may replace."""
    try:
        head = path.read_bytes()[:4096]
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"Software\x00" + MARK.encode() in head


def _heatmap(path: Path, data: torch.Tensor, title: str, xlabel: str, ylabel: str) -> None:
    from pipeline.figures import pyplot
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    import textwrap
    fig, ax = plt.subplots(figsize=(6, 4.5))
    im = ax.imshow(data.numpy(), aspect="auto", cmap="viridis", interpolation="nearest")
    # wrapped to the figure's width: a long title lost both ends, the encoding's name with them (walk 43h #3)
    ax.set_title("\n".join(textwrap.fill(line, 64) for line in title.split("\n")), fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, metadata={"Software": MARK})
    plt.close(fig)


def inspect(name: str, lengths: list[int], out_dir: Path, *, run_dir: Optional[Path] = None,
            dim: int = 100, heads: int = 1) -> dict:
    """Write the PNGs for encoding `name` at session `lengths` into `out_dir`; return a summary."""
    spec = get_spec(name)
    check_inputs(lengths, dim)
    refuse_nested(out_dir, "figures", "e.g. --out figures/" + name, itself=True)   # a stage would delete them with its folder
    torch.manual_seed(0)
    if run_dir is not None:
        enc, dim, heads, max_len = load_from_run(name, run_dir)
        source = f"trained run {run_dir}"
        if max(lengths) > max_len:
            raise ParamsError(f"length {max(lengths)} exceeds the run's max_len {max_len}", "pass shorter --lengths")
    else:
        max_len = max(lengths)
        enc = build_encoding(name, dim=dim, max_len=max_len, heads=heads, layers=1, options={})
        source = "initialisation (seed 0)" if spec.learnable else "definition"
    enc.eval()
    out_dir = Path(out_dir)
    files: list[str] = []
    head_dim = dim // heads

    jobs: list[tuple] = []

    def write(fname: str, data: torch.Tensor, title: str, xlabel: str, ylabel: str) -> None:
        jobs.append((fname, data, f"{name} ({spec.paper}) · {title}\nfrom {source}", xlabel, ylabel))

    with torch.no_grad():
        tables = {}
        for n in sorted(set(lengths)):
            t = enc.table(session(n))
            if t is not None:
                tables[n] = t[0].float()                                    # (l, m)
                write(f"{name}-matrix-L{n}.png", tables[n], f"encoding, length {n}", "dimension", "position")
                write(f"{name}-dot-L{n}.png", tables[n] @ tables[n].t(), f"dot products, length {n}",
                      f"position (length {n})", f"position (length {n})")
            if t is None or spec.family in ("rotary", "relative", "contextual", "parec"):
                write(f"{name}-attention-L{n}.png", attention_pattern(enc, n, head_dim, heads),
                      f"attention of a content-free query, length {n}", "key position", "query position")
        for a, b in itertools.combinations(sorted(tables), 2):
            write(f"{name}-dot-L{a}xL{b}.png", tables[a] @ tables[b].t(), f"dot products, lengths {a} x {b}",
                  f"position (length {b})", f"position (length {a})")
    theirs = [f for f, *_ in jobs if (out_dir / f).exists() and not _ours(out_dir / f)]
    if theirs:                                      # checked before any is written: all or nothing
        raise ParamsError(f"{out_dir / theirs[0]} exists and was not written by `seqpe encodings inspect`"
                          + (f" (nor {len(theirs) - 1} more of the files it would write)" if len(theirs) > 1 else ""),
                          "pass --out a new or empty folder (or move those files away)")
    for fname, *args in jobs:
        _heatmap(out_dir / fname, *args)
        files.append(fname)
    return {"encoding": name, "paper": spec.paper, "source": source, "out": str(out_dir), "files": files}

