"""Keep freed memory for the next allocation instead of handing it back to the system.

Every decoding step allocates tensors of megabytes and frees them at the next: a beam step's
log-probabilities over the vocabulary are ``(N, V)``, 18 MB for 565 rows of 8,000. glibc's
``malloc`` serves an allocation that large with fresh pages from the kernel (``mmap``) and
returns them when it is freed, and the kernel zeroes each fresh page at its first touch. On a
2-core Intel Xeon virtual machine that was 0.9 million page faults and 1.8 s of system time in
16 s of beam 5 over 1,000 sentences; with the two thresholds below raised, 50 thousand and 0.1 s
(docs/experiments.md, "Speed"). CTranslate2 gets the same from its own caching allocator.

A training step on a CPU does the same at a larger scale: the scores over the vocabulary, the
activations and their gradients are allocated and freed at every step. With the thresholds
raised, 20 steps of the CPU recipe's model on one thread of a 2-core AMD EPYC trained at 1.13x
the tokens per second in fp32 and 1.07x in bf16 (docs/experiments.md).

The price: the process keeps the memory it freed, so its resident size stays near its peak
(400 bf16 training updates of the CPU recipe with three validations, oneDNN's caches unbounded:
4.7 GB at most against 3.7). On one 2-core AMD EPYC virtual machine compiled greedy decoding of
a file ran slower with the thresholds raised, 228 against 256 sentences/s, and beam 5 faster,
73.4 against 68.6 (docs/experiments.md).
That suits a command that decodes a file, a server, and training, whose every step reaches the
same peak again; the inference commands call ``keep_freed_memory`` once, before they load a
model, and ``transformer-train`` before it builds one to train on a CPU.

oneDNN, which runs compiled decoding's products on packed weights and bf16 training's products,
keeps what it built for each product shape it has seen: its own primitive cache and ideep's
cache of computations above it, 1,024 entries each by default. Search changes its row count at
every batch and whenever rows finish, one sentence at a time its source length, and every
training batch has a length of its own, so the resident size grew with every new shape: the
compiled server of the CPU recipe's checkpoint went from 919 MB to 1,170 MB through a soak and
an overload of 500 clients, and 400 bf16 updates of the CPU recipe peaked at 4.5 GB (2-core
AMD EPYC). ``bound_onednn_caches`` bounds both caches. Decoding keeps 256 entries: a shape met
again costs nothing, a new one about 0.3 ms a product, and 256 hold every source length of
single sentences for the handful of weight shapes a step has; the server then ended at 954 MB
(1.04×; 878 MB with 64). Training keeps 64, as every batch is a new shape anyway: 400 bf16
updates then peaked at 1.9 GB in the same time with the same losses (docs/experiments.md).
The inference commands and ``transformer-train`` on a CPU call it with ``keep_freed_memory``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1  # free memory at the top of the heap past this goes back to the system
M_MMAP_THRESHOLD = -3  # allocations from this size up get pages of their own (mmap)
# Both raised to 1 GiB: every tensor of a decoding step comes from the heap, and the heap keeps
# what is freed.
THRESHOLD = 1 << 30
# Entries kept by oneDNN's primitive cache and by ideep's computation cache; both read their
# environment variable once, at their first use.
ONEDNN_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
ONEDNN_CACHE_ENTRIES = 256  # decoding's; training's: TRAINING_CACHE_ENTRIES
TRAINING_CACHE_ENTRIES = 64


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True if both were set, False
    where the C library is not glibc (nothing changes then)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD))


def bound_onednn_caches(entries: int = ONEDNN_CACHE_ENTRIES) -> dict[str, str]:
    """Bound oneDNN's caches of per-shape products to ``entries`` each, unless the environment
    already sets them (the user's value wins); the variables as they now stand. Only takes
    effect before the process's first oneDNN product: each cache reads its variable once."""
    return {name: os.environ.setdefault(name, str(entries)) for name in ONEDNN_CACHES}
