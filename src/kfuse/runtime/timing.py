"""CUDA-event timing: warm-up, then many repetitions queued back to back, median (and quartiles)."""
from __future__ import annotations

import statistics
from typing import Any, Callable, Iterable, NamedTuple

from .gpu import cupy

_flush_buffers: dict[int, tuple[object, object]] = {}


def l2_flush():
    """A callable that reads a buffer of four times the device's L2 (a sum into one entry), so
    that afterwards the L2 holds none of the data a call touched: lines are evicted clean, no
    write-back falls into the next call."""
    cp = cupy()
    dev = cp.cuda.Device().id
    if dev not in _flush_buffers:
        l2 = int(cp.cuda.Device(dev).attributes["L2CacheSize"]) or 50 * 2**20
        _flush_buffers[dev] = (cp.ones(l2, dtype=cp.float32), cp.zeros((), dtype=cp.float32))
    buf, sink = _flush_buffers[dev]
    return lambda: cp.sum(buf, out=sink)


class Quartiles(NamedTuple):
    """The first quartile, the median and the third quartile of repeated timings."""
    q1: float
    median: float
    q3: float


def quartiles(values: Iterable[float]) -> Quartiles:
    """Quartiles of ``values`` (inclusive method: they lie within the values; one value is its
    own quartiles); the median is ``statistics.median``'s."""
    data = sorted(float(v) for v in values)
    if not data:
        raise ValueError("quartiles of no values")
    if len(data) == 1:
        return Quartiles(data[0], data[0], data[0])
    q1, _, q3 = statistics.quantiles(data, n=4, method="inclusive")
    return Quartiles(q1, statistics.median(data), q3)


def median_us(fn: Callable[[], Any], reps: int = 50, warmup: int = 5, cold_l2: bool = False) -> float:
    """Median time of ``fn`` in microseconds (see ``quartiles_us``)."""
    return quartiles_us(fn, reps=reps, warmup=warmup, cold_l2=cold_l2).median


def quartiles_us(fn: Callable[[], Any], reps: int = 50, warmup: int = 5, cold_l2: bool = False) -> Quartiles:
    """Quartiles of the time of ``fn`` in microseconds, from CUDA events recorded around each call.

    Calls are queued without waiting in between, so host-side overhead is hidden whenever it
    is shorter than the GPU work (as in ``triton.testing.do_bench``).  With ``cold_l2`` a read
    of four times the L2 (outside the events) precedes every call: no call then finds what the
    call before it left in L2, only what its own kernels left for each other.
    """
    cp = cupy()
    flush = l2_flush() if cold_l2 else (lambda: None)
    for _ in range(warmup):
        flush()
        fn()
    cp.cuda.get_current_stream().synchronize()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for start, end in events:
        flush()
        start.record()
        fn()
        end.record()
    events[-1][1].synchronize()
    return quartiles(cp.cuda.get_elapsed_time(s, e) * 1e3 for s, e in events)
