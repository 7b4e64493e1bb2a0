"""Keep freed memory in the process heap while training on the CPU (glibc's malloc, Linux).

Why: every CPU training step allocates buffers the size of the item table and frees them again
(the dense (N, D) gradient of the embedding lookup, the chunked loss's (N, D) weight gradient; the
optimiser's zero_grad drops them). glibc's malloc serves a block above its mmap threshold (128 KiB,
raised on the fly only as far as 32 MiB) with fresh pages from the kernel and returns them on free,
so every step pays one page fault per 4 KiB page written, and the kernel zeroes each page first.
Measured with PosRec at 000's settings on Yoochoose 1/64 (a 37,484 x 100 table; bench/bench_step.py
--heap, bench/results/train.md): about 4,800 minor faults per step with glibc's defaults, 299
with the heap kept (while it grows over the first steps), and a 1.11x faster step.

What: `keep()` raises glibc's mmap threshold and trim threshold to 1 GiB (mallopt M_MMAP_THRESHOLD,
M_TRIM_THRESHOLD), so such blocks come from the heap and go back to it, and the next step reuses
the same, already mapped pages. Blocks of 1 GiB or more are still mapped on their own. The cost:
the process keeps the memory of its largest step until it exits (resident memory stays at the
step's peak instead of dropping between steps), which is what a training process wants.

Why by hand: torch has no caching allocator for CPU tensors, and the usual remedy (jemalloc or
tcmalloc through LD_PRELOAD) needs a system library and an environment set before the process
starts; two mallopt calls do the same for this allocation pattern from inside `seqpe train`.
Left alone where it does not apply: other C libraries (musl, macOS, Windows), a malloc replaced
through LD_PRELOAD (glibc's mallopt would not reach it), and a user who set MALLOC_MMAP_THRESHOLD_
or MALLOC_TRIM_THRESHOLD_ (or their GLIBC_TUNABLES glibc.malloc.* names): their choice wins.
Values are unaffected; only where the bytes live changes, so outputs stay byte-identical.
"""
from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD = -1        # glibc's malloc.h parameter numbers
M_MMAP_THRESHOLD = -3
THRESHOLD = 1 << 30          # 1 GiB
_done = False


def applies() -> bool:
    """True where keep() changes anything: Linux glibc, no LD_PRELOAD'ed allocator, no user tunables."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")) or \
            "malloc.mmap_threshold" in tunables or "malloc.trim_threshold" in tunables:
        return False
    return not any(name in os.environ.get("LD_PRELOAD", "") for name in ("jemalloc", "tcmalloc", "mimalloc"))


def keep() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once); True when they are now raised."""
    global _done
    if _done:
        return True
    if not applies():
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        _done = libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, THRESHOLD) == 1
    except (OSError, AttributeError):
        return False
    return _done
