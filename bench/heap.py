"""Collections kept off what a finished run leaves in the heap while its results are computed.

A ``bench run`` process holds a large heap before it computes anything: the imported libraries
(a client-side tokenizer brings transformers and torch) and, after the load, every record. The
summary and the report then allocate dicts, lists and tuples by the thousand, and each time the
oldest generation fills, the collector walks that whole heap to find nothing to free; that cost
grows with the run (a share of the bench's CPU per request in benchmarks/bench_same_shape.py).
``gc.freeze`` moves what exists out of every generation in constant time: those objects are
still freed by reference counting, and only reference cycles among them wait for the unfreeze.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """What exists on entry is out of collections until the block ends (then it is back)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
