"""CUDA-event timing: warm-up, then many repetitions queued back to back, median."""
from __future__ import annotations

import statistics

from .gpu import cupy


def median_us(fn, reps: int = 50, warmup: int = 5) -> float:
    """Median time of ``fn`` in microseconds, from CUDA events recorded around each call.

    Calls are queued without waiting in between, so host-side overhead is hidden whenever it
    is shorter than the GPU work (as in ``triton.testing.do_bench``).
    """
    cp = cupy()
    for _ in range(warmup):
        fn()
    cp.cuda.get_current_stream().synchronize()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    events[-1][1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(s, e) * 1e3 for s, e in events)
