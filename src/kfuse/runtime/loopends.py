"""A device loop run's two ends (``runtime/loop.Instance``, read through its fields): before the
steps, the counter's first value, a while loop's control words and numbers, the first step's
clears and the initial state copied into buffer set 0; after them, the result copied into new
arrays.

Why one launch each: a run's host time before its graph launch is time the GPU waits, and a
copy or a launch costs the host several microseconds to prepare.  ``kf_loop_start`` and
``kf_loop_copies`` (written by ``codegen/loop/control.start_source``) take every copy as an
argument triple; the launches are made once per instance and a run patches its sources,
destinations and numbers.  A loop that
carries no entry (its state all read in place) keeps the small launches and copies of its own."""
from __future__ import annotations

import numpy as np

from ..ir.loop import counts
from .args import facts
from .gpu import cupy
from .launch import KernelLaunch, PackedArgs

H2D = 1


def blocks(n: int) -> int:
    """Blocks of 256 threads for a grid-stride loop over n entries (at most 1024)."""
    return max(1, min(1024, -(-n // 256)))


class Ends:
    """The launches of a loop instance's run ends; made when the instance's clears are fixed
    (``Instance._split_fills``), since the start's clears are arguments of its one launch."""

    def __init__(self, inst):
        self.inst = inst
        item = inst.dtype.itemsize
        self.sizes = [inst.nbytes[j] // item for j in inst.carried]
        ranges = inst._ranges(0)
        self.numbers = counts((inst.pred,))[1] if inst.pred is not None else 0
        self._start = self._finish = None
        self._parts: dict = {}
        if not inst.carried:
            return
        real = inst.dtype.type
        args = [facts(inst.index)[4] if inst.art.indexed else 0, real(0),
                facts(inst.ctl)[4] if inst.pred is not None else 0, np.int32(0), facts(inst.cst)[4]]
        args += [real(0)] * self.numbers
        args += [a for ptr, n, value in ranges for a in (ptr, np.int64(n), real(value))]
        self._first = len(args)             # the first copy's triple
        args += [a for j, n in zip(inst.carried, self.sizes) for a in (inst.ptr[0][j], 0, np.int64(n))]
        most = max([n for _, n, _ in ranges] + self.sizes)
        self._start = KernelLaunch(inst.fn["kf_loop_start"], blocks(most), 256, PackedArgs(tuple(args)), "kf_loop_start")
        out = [np.int32(0)] + [a for n in self.sizes for a in (0, 0, np.int64(n))]
        self._finish = KernelLaunch(inst.fn["kf_loop_copies"], blocks(max(self.sizes)), 256, PackedArgs(tuple(out)),
                                    "kf_loop_copies")

    def start(self, sources: list[int], index: float, consts, most: int, stream: int) -> None:
        """Launch a run's start: ``sources`` the pointers of the carried entries' initial values,
        ``consts`` the while loop's numbers."""
        if self._start is None:
            self._start_parts(index, consts, most, stream)
            return
        values = self._start.args.values
        values[1].value, values[3].value = index, most
        for k, c in enumerate(list(consts)[:self.numbers]):
            values[5 + k].value = c
        for k, ptr in enumerate(sources):
            values[self._first + 3 * k + 1].value = ptr
        self._start.launch(stream)

    def finish(self, pairs: list[tuple[int, int]], stream: int) -> None:
        """Launch a run's end: (destination, source) pointers of each carried entry."""
        if self._finish is None:
            return
        values = self._finish.args.values
        for k, (dst, src) in enumerate(pairs):
            values[1 + 3 * k].value, values[2 + 3 * k].value = dst, src
        self._finish.launch(stream)

    def _start_parts(self, index: float, consts, most: int, stream: int) -> None:
        """A start with no entry to copy: the control words and numbers copied from the host, the
        counter's first value and the clears launched (made once: their pointers are fixed)."""
        inst, cp = self.inst, cupy()
        if inst.pred is not None:
            # from pageable memory: staged before the call returns (no wait for the stream)
            self._host = (np.array([0, 1, 1, most, 1], np.int32), np.array(list(consts) or [0.0], inst.dtype))
            for dev, host in zip((inst.ctl, inst.cst), self._host):     # numbers past those read: not copied
                cp.cuda.runtime.memcpyAsync(facts(dev)[4], host.ctypes.data, min(host.nbytes, dev.nbytes), H2D, stream)
        if inst.art.indexed:
            if "set" not in self._parts:
                self._parts["set"] = inst._launch("kf_loop_set", facts(inst.index)[4], inst.dtype.type(0))
            self._parts["set"].args.values[1].value = index        # the counter's first value
            self._parts["set"].launch(stream)
        if inst.clears:
            if "clear" not in self._parts:
                self._parts["clear"] = inst._clear(0)
            self._parts["clear"].launch(stream)
