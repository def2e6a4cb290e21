"""The order in which a kernel walks its blocks, chosen at launch so that it starts on the data the
kernel before it touched last, while that data is still in L2.

Every generated kernel is built with an order (codegen/emit.py: the macro ``KF_ORDER_<kernel>``,
0 unless the module is built for another; a runtime argument costs: docs/design.md,
'Block order and PDL between kernels'):
  bit 0  the blocks are walked from the last one (block b does the work of block G-1-b);
  bit 1  (2-level nested kernels) consecutive blocks follow the loop axis: block groups across
         the loop axis are numbered first, the groups along it second.
The GPU starts blocks roughly in index order, so the order decides which part of each array a
kernel reads early and which part it touches last.  A consumer whose first reads are the
producer's last touches finds them in L2: GEMVER's w = a B x can read the rows of B that the
kernel before it wrote last; ATAX's y = A^T t the part of A that t = A x read last.

Bit 1 follows from the kernel (``band_bit``); bit 0 is chosen by a small model, not a measurement: each kernel's instances are given a time (block
start, a wave of resident blocks at a time, plus the serial iteration), every global array is cut
into the regions instances touch (a tile, a subvector), and an LRU cache of ``capacity`` bytes is
assumed.  A region the producer touched last is still there when the consumer reaches it if the
producer's more recent bytes plus the consumer's bytes before it fit the capacity.  The
direction with the more such bytes wins; a tie walks forward.
Bit 2 lets the next kernel launch early (``launch_orders``).
Bit 3 mirrors bit 0 on every other call of the program (the kernel argument ``kf_flip``, set by
the executor: ``Binding.set_flip``): a program called again on the same arrays, as a solver's
step is, then starts each call on what the call before it touched last.  Set on every kernel of a
program whose arrays take at most ``ALTERNATE_SPAN`` times the L2 (``alternates``); elsewhere
the part left in L2 is too small a share to pay for the flip (a runtime select costs about 0.5 %
in kernels of many small blocks).  Rule and measurements: docs/design.md, 'Calls alternating the
mirrored order' (a solver's step gains where its arrays fit a few times the L2, not far beyond).
``KFUSE_ORDER=o0,o1,...`` forces bits 0 and 1 (one per kernel; for experiments).
"""
from __future__ import annotations

import os
from typing import Any, Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np

from ..env import block_orders, switch
from ..errors import KfuseError
from ..ir.artifact import Artifact, LaunchedKernel
from ..ir.kernel import target_blocks, upper_tiles
from .gpu import device_limits

L2_SHARE = 0.5          # of the device's L2 assumed to hold the producer's most recent data


@dataclass
class _Touches:
    """Regions of a kernel's global arrays, with a time per region (first or last touch)."""
    keys: np.ndarray        # int64: value id << 40 | region index
    times: np.ndarray       # float64
    nbytes: np.ndarray      # float64: bytes of each region


#: at most about this many instances stand for a kernel in the cache model: beyond it, runs of
#: consecutive instances along each axis are one region (a 2^26 vector: 2M subvectors would take
#: seconds to sort at the first launch)
SAMPLES = 1 << 16


def _strides(counts: tuple[int, ...]) -> tuple[int, ...]:
    """Instances per region along each axis: 1 while the instance space is small, else the same
    power-of-two run along every axis, so that at most about SAMPLES regions remain."""
    total = int(np.prod(counts))
    if total <= SAMPLES:
        return (1,) * len(counts)
    g = 1
    while int(np.prod([-(-c // g) for c in counts])) > SAMPLES:
        g *= 2
    return (g,) * len(counts)


def _instances(L, dims: dict[int, int], iters: int, order: int, resident: int, strides: tuple[int, ...],
               last: bool):
    """Coordinates (i, j) of the regions (``strides`` instances along each axis) of kernel launch L
    walked in ``order``, and each region's time: its last instance's (``last``) or its first's."""
    counts = L.counts(dims)
    if L.nesting == 1:
        n = counts[0]
        per_block = iters * L.ipb
        i = np.arange(n, dtype=np.int64)
        b = i // per_block
        it = (i % per_block) // L.ipb
        grid = -(-n // per_block)
        if order & 1:
            b = grid - 1 - b
        t = _coarse(b * (iters / resident) + it, strides[0], last)
        return (np.arange(len(t), dtype=np.int64),), t
    if L.triangle:
        # the upper tiles as one sequence: block b takes tiles b, b + G, ... (codegen/emit.py); the
        # regions' times are the latest (or earliest) of their instances' (_touches)
        s = np.arange(L.instances(dims), dtype=np.int64)
        grid = max(1, -(-len(s) // iters))
        b, it = s % grid, s // grid
        if order & 1:
            b = grid - 1 - b
        i, j = upper_tiles(s, counts[0])
        return (i // strides[0], j // strides[1]), b * (iters / resident) + it
    along_n, across_n = (counts[0], counts[1]) if L.loop == "i" else (counts[1], counts[0])
    ga, gc = (strides[0], strides[1]) if L.loop == "i" else (strides[1], strides[0])
    a = np.arange(along_n, dtype=np.int64)[:, None]
    c = np.arange(across_n, dtype=np.int64)[None, :]
    groups_along = -(-along_n // iters)
    groups_across = -(-across_n // L.span)
    ag, it, cg = a // iters, a % iters, c // L.span
    b = cg * groups_along + ag if order & 2 else ag * groups_across + cg
    if order & 1:
        b = groups_along * groups_across - 1 - b
    t = _coarse(_coarse(b * (iters / resident) + it, ga, last).T, gc, last).T     # (along, across) regions
    ra = np.repeat(np.arange(t.shape[0], dtype=np.int64), t.shape[1])
    rc = np.tile(np.arange(t.shape[1], dtype=np.int64), t.shape[0])
    return ((ra, rc) if L.loop == "i" else (rc, ra)), t.ravel()


def _coarse(t: np.ndarray, g: int, last: bool) -> np.ndarray:
    """Times of runs of ``g`` along the first axis: the latest (``last``) or the earliest of each."""
    if g == 1:
        return t
    n = t.shape[0]
    pad = -n % g
    if pad:
        t = np.concatenate([t, np.full((pad,) + t.shape[1:], -np.inf if last else np.inf)])
    t = t.reshape((-1, g) + t.shape[1:])
    return t.max(axis=1) if last else t.min(axis=1)


def _global_params(code: LaunchedKernel) -> list[tuple[Any, tuple[str, ...]]]:
    """(value, instance axes it follows) of every array the kernel reads or writes in global
    memory (arrays kept on chip are not kernel arguments)."""
    in_global = {g.value.id for g in code.launch.args
                 if g.kind == "array" and g.value is not None and g.value.type != "scalar"}
    seen: dict[int, tuple[Any, tuple[str, ...]]] = {}
    for kc in code.spec.calls:
        binds = kc.call.bindings()
        for p in (*kc.call.function.inputs, *kc.call.function.outputs):
            v = binds.get(p.name)
            if v is not None and getattr(v, "id", None) in in_global and v.id not in seen:
                seen[v.id] = (v, tuple(p.index))
    return list(seen.values())


def _touches(code: LaunchedKernel, dims, iters, order, resident, itemsize, last: bool) -> _Touches:
    counts = code.launch.counts(dims)
    strides = _strides(counts)
    coords, t = _instances(code.launch, dims, iters, order, resident, strides, last)
    axis = {"i": 0, "j": 1}
    keys, times, nbytes = [], [], []
    for v, index in _global_params(code):
        if not index or any(x not in axis or axis[x] >= len(coords) for x in index):
            continue
        shape = [-(-counts[axis[x]] // strides[axis[x]]) for x in index]
        region = np.zeros_like(coords[0])
        for x, n in zip(index, shape):
            region = region * n + coords[axis[x]]
        size = int(np.prod(shape))
        total = itemsize * float(np.prod([dims[d] for d in v.dims]))
        per = np.full(size, -np.inf if last else np.inf)
        (np.maximum if last else np.minimum).at(per, region, t)
        touched = np.isfinite(per)     # all but the lower tiles of a kernel on a triangle
        keys.append(((np.int64(v.id) << 40) | np.arange(size, dtype=np.int64))[touched])
        times.append(per[touched])
        nbytes.append(np.full(size, total / size)[touched])
    if not keys:
        return _Touches(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    return _Touches(np.concatenate(keys), np.concatenate(times), np.concatenate(nbytes))


def reuse_bytes(producer: _Touches, consumer: _Touches, capacity: float) -> float:
    """Bytes the consumer finds in an LRU cache of ``capacity`` bytes left by the producer."""
    p = np.argsort(-producer.times, kind="stable")
    depth = np.cumsum(producer.nbytes[p])          # bytes at least as recent, the region included
    keep = depth <= capacity
    if not keep.any() or not len(consumer.keys):
        return 0.0
    rkeys, rdepth = producer.keys[p][keep], depth[keep]
    s = np.argsort(rkeys)
    rkeys, rdepth = rkeys[s], rdepth[s]
    c = np.argsort(consumer.times, kind="stable")
    ckeys, cbytes = consumer.keys[c], consumer.nbytes[c]
    before = np.cumsum(cbytes) - cbytes            # the consumer's bytes before it reaches each
    pos = np.minimum(np.searchsorted(rkeys, ckeys), len(rkeys) - 1)
    hit = (rkeys[pos] == ckeys) & (rdepth[pos] + before <= capacity)
    return float(cbytes[hit].sum())


def band_bit(code: LaunchedKernel) -> int:
    """Bit 1 of a nested kernel's order: set when its loop walks the contiguous axis of the first
    matrix it reads or writes in global memory (the last axis the matrix follows; in the shipped
    library every matrix of a kernel follows (i, j)), so that consecutive blocks, which the GPU
    runs together, always cover whole rows of it (docs/design.md, 'Block order and PDL between
    kernels')."""
    if code.launch.nesting != 2:
        return 0
    mats = [(v, index) for v, index in _global_params(code) if v.type == "matrix" and len(index) == 2]
    if not mats:
        return 0
    _, index = mats[0]
    return 2 if code.launch.loop == index[-1] else 0


def choose_orders(kernels: Sequence[LaunchedKernel], dims: dict[int, int], iters: list[int], resident: list[int], itemsize: int,
                  capacity: float) -> list[int]:
    """Order per kernel: row bands (``band_bit``) always; the first kernel walks forward, each
    later one backward when that finds more of the previous kernel's last touches in the cache."""
    orders = [band_bit(kernels[0])]
    for k in range(1, len(kernels)):
        prev, code = kernels[k - 1], kernels[k]
        band = band_bit(code)
        shared = {v.id for v, _ in _global_params(prev)} & {v.id for v, _ in _global_params(code)}
        if not shared:
            orders.append(band)
            continue
        left = _touches(prev, dims, iters[k - 1], orders[-1], resident[k - 1], itemsize, last=True)
        got = [reuse_bytes(left, _touches(code, dims, iters[k], band | rev, resident[k], itemsize, last=False),
                           capacity) for rev in (0, 1)]
        orders.append(band | (1 if got[1] > got[0] * 1.01 + 1.0 else 0))
    return orders


def forced_orders(count: int) -> list[int] | None:
    """The block orders ``$KFUSE_ORDER`` forces on a launch of ``count`` kernels (None: unset);
    a KfuseError naming the variable and its form when a value is not 0 to 3 (env.block_orders)
    or their count is not the launch's."""
    orders = block_orders()
    if orders is not None and len(orders) != count:
        raise KfuseError(f"KFUSE_ORDER={','.join(map(str, orders))!r}: give {count} order(s) (one per "
                         "kernel of the launch), each 0 to 3")
    return orders


# the runtime's tables per artifact (they go with it): launch shapes and block orders per sizes
_tables: WeakKeyDictionary[Artifact, dict[str, dict]] = WeakKeyDictionary()


def _table(artifact: Artifact, name: str) -> dict:
    tables = _tables.get(artifact)
    if tables is None:
        tables = _tables.setdefault(artifact, {})
    return tables.setdefault(name, {})


def launch_shape(artifact: Artifact, dims: dict[int, int], device: int) -> tuple[tuple[int, int], ...]:
    """(target blocks, serial iterations) of each kernel of ``artifact`` launched at sizes ``dims``
    (iterations chosen at launch aim at a grid of two waves: ir.kernel.target_blocks); cached."""
    cache = _table(artifact, "shape")
    key = (tuple(sorted(dims.items())), device)
    if key not in cache:
        shape = []
        for code in artifact.kernels:
            target = target_blocks(*device_limits(device), code.launch.threads)
            shape.append((target, code.launch.iterations(dims, target)))
        cache[key] = tuple(shape)
    return cache[key]


ALLOW_NEXT = 4
ALTERNATE = 8
ALTERNATE_SPAN = 12     # a program whose arrays take at most this many times the L2 alternates


def alternates(artifact: Artifact, dims: dict[int, int], l2: int) -> bool:
    """Whether the kernels of ``artifact`` at sizes ``dims`` take bit 3 (calls alternating the
    mirrored order): the bytes of every global array they touch, each counted once, at most
    ALTERNATE_SPAN times the L2.  Nothing is alternated without a kernel or with KFUSE_ALTERNATE=0."""
    if not switch("KFUSE_ALTERNATE") or not artifact.kernels:
        return False
    arrays = {v.id: v for code in artifact.kernels for v, _ in _global_params(code)}
    nbytes = np.dtype(artifact.dtype).itemsize * sum(
        float(np.prod([dims[d] for d in v.dims])) for v in arrays.values())
    return nbytes <= ALTERNATE_SPAN * l2


def launch_orders(artifact: Artifact, dims: dict[int, int], device: int, pdl: bool) -> tuple[int, ...]:
    """The order each kernel of ``artifact`` is built with for a launch at sizes ``dims``: bits 0
    and 1 (the block order, see the module's docstring; ``KFUSE_ORDER`` forces them), plus bit 2
    (kf_allow_next at the kernel's start) on a kernel whose next kernel is launched dependent on it
    (PDL: it waits for this one) and whose grid is at most two waves.  A kernel of many small
    blocks pays for the signal in every block, more than an early launch of the next saves
    (docs/design.md, 'Block order and PDL between kernels')."""
    cache = _table(artifact, "orders")
    key = (tuple(sorted(dims.items())), device, pdl, os.environ.get("KFUSE_ORDER", ""),
           os.environ.get("KFUSE_ALTERNATE", ""))
    if key not in cache:
        from .gpu import cupy
        kernels = artifact.kernels
        shape = launch_shape(artifact, dims, device)
        l2 = int(cupy().cuda.Device(device).attributes["L2CacheSize"])
        orders = forced_orders(len(kernels))
        if orders is None and len(kernels) < 2:
            orders = [band_bit(k) for k in kernels]
        elif orders is None:
            orders = choose_orders(kernels, dims, [it for _, it in shape], [max(1, t // 2) for t, _ in shape],
                                   np.dtype(artifact.dtype).itemsize, L2_SHARE * l2)
        if alternates(artifact, dims, l2):
            orders = [o | ALTERNATE for o in orders]
        for k in range(len(kernels) - 1):
            (target, iters), L = shape[k], kernels[k].launch
            if pdl and kernels[k + 1].launch.waits and L.grid(dims, iters) <= target:
                orders[k] |= ALLOW_NEXT
        cache[key] = tuple(orders)
    return cache[key]


def order_defines(kernels: Sequence[LaunchedKernel], orders: Sequence[int], source: str = "") -> str:
    """``#define KF_ORDER_<kernel> <order>`` lines for the kernels' non-zero orders, less those
    ``source`` has already (a module built for several programs at once)."""
    lines = [f"#define KF_ORDER_{k.launch.kernel} {o}\n" for k, o in zip(kernels, orders) if o]
    return "".join(line for line in lines if line not in source)


GENERATED = '"kfuse-generated.cu"\n'     # the end of a module's #line directive before its kernels


def with_orders(source: str, defines: str) -> str:
    """``source`` with ``defines`` (``order_defines``') just before its generated kernels: after
    the library's routine files, which never see them -- a routine is checked for barriers as its
    file opens in the module (codegen/barrier_check.py), and an ``#ifdef KF_ORDER_...`` there
    must not change it -- or first in a source without kernels of kfuse's."""
    at = source.rfind(GENERATED)
    if not defines or at < 0:
        return defines + source
    start = source.rfind("\n", 0, at) + 1
    return source[:start] + defines + source[start:]
