"""The kernel vocabulary of a plan: the calls a kernel holds with their variant choices
(``KernelCall``), what to generate (``KernelSpec``), and the host-side launch description of a
generated kernel (``LaunchInfo``, ``GlobalArg``) with its launch policy (serial iterations, grid)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..errors import FusionError
from ..library.schema import Library, Routine, Variant
from .program import Call, Value
from .record import quick_init


SCALAR_SUM_ITERS = 8      # fewest automatic serial iterations of a kernel that sums into a scalar
MAX_THREADS_PER_SM = 2048     # resident threads per SM (every GPU since sm_50 but a few sm_7x/8x)
REGISTERS_PER_SM = 65536      # 32-bit registers per SM (and at most per block)
STRIP_REGISTER_OVERHEAD = 24  # registers per thread of a strip kernel beyond its elements (indices, sums)
ROWS_LOOP_I_MARGIN = 32      # and of one whose vector calls on the strips' rows run in a serial loop along i:
                             # nvcc pipelines the strips (float64 gemv + dot, R = 2, NC = 8192, 256 threads:
                             # 226 estimated, 255 used and 84 bytes spilled along i, 224 used along j)
CLUSTER_REGISTER_OVERHEAD = 8  # and of a cluster's row sums (the partial a lane reads, its address): the
                               # widest strips at 128 registers spilled 4-24 bytes without it (nvcc sm_90)


def target_blocks(sms: int, max_threads_per_sm: int, threads: int) -> int:
    """Blocks for two full waves of a GPU with ``sms`` multiprocessors: the grid size that
    automatic serial iterations aim at (the executor on the device, the calibrated model from a
    calibration's device facts)."""
    return 2 * sms * max(1, max_threads_per_sm // threads)


@quick_init
@dataclass(frozen=True)
class KernelCall:
    """A call placed in a kernel, with the routine variant and macro values chosen for it.  Its
    methods are the questions the scheduler, the cost model and a plan's explanation ask of one
    placed call (macros, nesting, shapes, routine facts, tiles), memoised on it, hence their number."""
    call: Call
    variant: Variant
    macros: tuple[tuple[str, int], ...] = ()

    def macro(self, name: str) -> int:
        return self._macro_map[name]

    @cached_property
    def _macro_map(self) -> dict[str, int]:
        return dict(self.macros)

    @cached_property
    def nesting(self) -> int:
        """The nesting of the kernel this call can run in: its function's, but 2 for a 1-level
        function's variant on the rows of strips (``whole = ["j"]``: once per strip of a nested
        kernel, its instance axis the strips' rows).  Memoised: kernel calls are shared by the
        implementations of a program (ScheduleMemo.calls), the layout asks per step."""
        return 2 if self.variant.whole else self.call.function.nesting

    @cached_property
    def on_rows(self) -> bool:
        """A 1-level call run on the rows of a nested kernel's strips."""
        return bool(self.variant.whole) and self.call.function.nesting == 1

    @property
    def cluster(self) -> int:
        """Blocks per thread-block cluster (1: the variant declares none)."""
        return self.macro(self.variant.cluster) if self.variant.cluster else 1

    @property
    def template_macros(self) -> tuple[tuple[str, int], ...]:
        """The macros its routines take as template parameters (all but the cluster's)."""
        return tuple(m for m in self.macros if m[0] != self.variant.cluster) if self.variant.cluster else self.macros

    def value_of(self, x: str | int) -> int:
        return x if isinstance(x, int) else self.macro(x)

    def shape(self, routine: Routine) -> tuple[int, int]:
        """Threads (x, y) of one of the variant's routines with these macros."""
        got = self._shapes.get(id(routine))
        if got is None or got[0] is not routine:
            got = self._shapes[id(routine)] = (routine, (self.value_of(routine.threads[0]),
                                                         self.value_of(routine.threads[1])))
        return got[1]

    @cached_property
    def _shapes(self) -> dict[int, tuple[Routine, tuple[int, int]]]:
        """``shape`` memoised by the routine's identity (kept with the routine)."""
        return {}

    def routine_values(self, routine: Routine) -> tuple[tuple[Value, ...], tuple[Value, ...]]:
        """(the arrays a routine's global arguments bind, the scalar values its scalar
        arguments read), each in argument order (memoised like ``shape``)."""
        got = self._values.get(id(routine))
        if got is None or got[0] is not routine:
            binds = self.call.bindings()
            arrays = tuple(binds[a.name] for a in routine.args if a.kind == "global")
            scalars = tuple(v for a in routine.args if a.kind == "scalar" for v in binds[a.name].values())
            got = self._values[id(routine)] = (routine, (arrays, scalars))
        return got[1]

    @cached_property
    def _values(self) -> dict[int, tuple[Routine, tuple[tuple[Value, ...], tuple[Value, ...]]]]:
        return {}

    def array_args(self, routine: Routine) -> tuple[GlobalArg, ...]:
        """The kernel arguments of ``routine_values``' arrays (memoised like it)."""
        got = self._array_args.get(id(routine))
        if got is None or got[0] is not routine:
            args = tuple(GlobalArg("array", v.label, v) for v in self.routine_values(routine)[0])
            got = self._array_args[id(routine)] = (routine, args)
        return got[1]

    @cached_property
    def _array_args(self) -> dict[int, tuple[Routine, tuple[GlobalArg, ...]]]:
        return {}

    def routine_facts(self, routine: Routine) -> tuple[tuple[int, int], bool, tuple[GlobalArg, ...],
                                                       tuple[Value, ...], tuple[Value, ...], frozenset[int]]:
        """(``shape``, does the routine exchange values between the lanes of a warp, ``array_args``,
        ``routine_values``' arrays and scalars, the ids of those values) in one look-up (memoised
        like them): what a kernel's frame reads of each of its steps (codegen/frame.py)."""
        got = self._facts.get(id(routine))
        if got is None or got[0] is not routine:
            arrays, scalars = self.routine_values(routine)
            got = self._facts[id(routine)] = (routine, (self.shape(routine), routine.name in self.variant.warp_wide,
                                                        self.array_args(routine), arrays, scalars,
                                                        frozenset(v.id for v in arrays + scalars)))
        return got[1]

    @cached_property
    def _facts(self) -> dict[int, tuple]:
        return {}

    def routine_plan(self, routine: Routine) -> tuple[tuple[int, int], tuple[tuple[str, str, str], ...]]:
        """(``shape``, the routine's element arguments as (name, mode, mapping)): what the
        scheduler reads of each routine it adds (memoised like ``shape``); raises FusionError
        when the threads neither divide a warp nor are whole warps."""
        got = self._plans.get(id(routine))
        if got is None or got[0] is not routine:
            X, Y = XY = self.shape(routine)
            if (X * Y) % 32 and 32 % (X * Y):
                raise FusionError(f"{self.describe()} routine {routine.name}: {X}x{Y} threads neither divides "
                                  "a warp nor is whole warps")
            args = tuple((a.name, str(a.mode), str(a.mapping)) for a in routine.elements)
            got = self._plans[id(routine)] = (routine, (XY, args))
        return got[1]

    @cached_property
    def _plans(self) -> dict[int, tuple]:
        return {}

    @cached_property
    def memo(self) -> dict[str, Any]:
        """What code generation derives from this call alone, by name (``codegen/schedule.py``
        ``load_plan``): kept with the call, which a program's specs share."""
        return {}

    @cached_property
    def accesses(self) -> dict[tuple, tuple]:
        """The scheduler's accesses of this call's routines by (element, mode, mapping, threads),
        each with the element's shape it was checked against (``Scheduler.add_routine``): a
        program's specs share their kernel calls (``ScheduleMemo.calls``) and make the same
        accesses again and again."""
        return {}

    def tile(self, lib: Library) -> tuple[int, int]:
        """Rows x columns of the tile an instance of a 2-level call covers (memoised by the
        library's default tile: the layout checks it for every spec)."""
        got = self._tiles.get(lib.tile)
        if got is None:
            got = self._tiles[lib.tile] = self.variant.tile_shape(self._macro_map, lib.tile)
        return got

    @cached_property
    def _tiles(self) -> dict[tuple[int, int], tuple[int, int]]:
        return {}

    def describe(self) -> str:
        m = ", ".join(f"{k}={v}" for k, v in self.macros)
        return f"{self.call.function.name}/{self.variant.name}" + (f"[{m}]" if m else "")


@quick_init
@dataclass(frozen=True)
class KernelSpec:
    """What to generate: calls in execution order plus the kernel-wide choices."""
    name: str
    calls: tuple[KernelCall, ...]
    iters: int = 0                  # serial iterations along the loop axis (0: chosen at launch)
    ipb: int = 1                    # instances per block (unnested kernels)
    stores: frozenset[int] = frozenset()    # value ids this kernel must write to global memory
    loop: str = "i"                 # instance axis the serial loop walks (nested kernels: i or j)
    unroll: int = 1                 # serial iterations whose loads are issued together
    span: int = 1                   # nested kernels: instances across the loop axis per block

    @property
    def nesting(self) -> int:
        """1 or 2 (a kernel of 1-level calls on the rows of strips beside 2-level calls: 2).  Its
        calls' nestings agree (layout.check_spec refuses a kernel where they do not), so the
        first call's (asked for per step: no loop over the calls)."""
        return self.calls[0].nesting

    @property
    def triangle(self) -> bool:
        """A kernel of a call on the upper triangle (a variant with ``triangle``; such a call is
        alone in its kernel: fusion/legality.py, same_instances)."""
        return any(kc.variant.triangle for kc in self.calls)

    @property
    def cluster(self) -> tuple[int, int]:
        """(blocks per thread-block cluster, index of the axis its blocks span together: 0 for i,
        1 for j) of a kernel of cluster variants (its calls agree: layout.check_spec); else (1, -1)."""
        for kc in self.calls:
            if kc.variant.cluster:
                return kc.cluster, ("i", "j").index(kc.variant.whole[0])
        return 1, -1


@quick_init
@dataclass(frozen=True)
class GlobalArg:
    """A kernel argument: an array (pointer and sizes), a scalar, or an instance count."""
    kind: str                       # array | scalar | count
    name: str                       # C parameter name
    value: Value | None = None
    axis: int | None = None         # count: dimension id; divisor: element extent
    divisor: int = 1
    multiple: int = 1               # count: rounded up to a multiple of this (a cluster's blocks)

    def count(self, dims: dict[int, int]) -> int:
        """A count argument's value at sizes ``dims``: instances along its axis."""
        assert self.axis is not None, "a count has its dimension"
        n = -(-dims[self.axis] // self.divisor)
        return -(-n // self.multiple) * self.multiple


@quick_init
@dataclass(frozen=True)
class LaunchInfo:
    """Host-side launch description of one kernel."""
    kernel: str
    threads: int                    # per block
    nesting: int
    iters: int                      # 0: chosen at launch
    ipb: int
    axis_dims: tuple[int, ...]      # dimension id of axis i (and j)
    axis_extent: tuple[int, ...]    # entries per element along each axis
    args: tuple[GlobalArg, ...]
    clears: tuple[tuple[Value, str], ...]   # outputs set to the identity before the launch
    smem_bytes_per_real: int        # shared entries per block (multiply by sizeof(real))
    calls: tuple[int, ...]          # program call indices in this kernel
    loop: str = "i"
    span: int = 1                   # instances across the loop axis per block (nested kernels)
    unroll: int = 1
    carried: bool = True            # work before or after the loop (invariant loads, accumulators)
    waits: bool = False             # calls kf_wait_prior before touching what an earlier launch wrote (PDL)
    whole_entries: int = 0          # a kernel of strips spanning an axis whole: its register entries per
                                    # thread (0: not such a kernel); its grid is one resident wave
    cluster: int = 1                # blocks per thread-block cluster, together spanning axis
    cluster_axis: int = -1          # cluster_axis whole (-1: no cluster)
    rows: bool = False              # it holds vector calls on the rows of its strips
    triangle: bool = False          # its instances are the upper tiles (I <= J) of a square matrix only,
                                    # numbered row by row and walked by every block together (upper_tiles)

    @property
    def rows_loop_i(self) -> bool:
        """Vector calls on the strips' rows in a serial loop along i (ROWS_LOOP_I_MARGIN)."""
        return self.rows and self.loop == "i"

    def counts(self, dims: dict[int, int]) -> tuple[int, ...]:
        """Instances along each axis (partial edge elements included); along a cluster's axis a
        multiple of the cluster (blocks past the end read zeros and add nothing)."""
        counts = tuple(-(-dims[d] // e) for d, e in zip(self.axis_dims, self.axis_extent))
        if self.cluster > 1:
            c = self.cluster
            counts = tuple(-(-n // c) * c if k == self.cluster_axis else n for k, n in enumerate(counts))
        return counts

    def instances(self, dims: dict[int, int]) -> int:
        """Instances the kernel runs: every tile, or the upper ones of a kernel on a triangle."""
        counts = self.counts(dims)
        if self.triangle:
            return counts[0] * (counts[0] + 1) // 2
        n = 1
        for c in counts:
            n *= c
        return n

    def _split(self, dims: dict[int, int]) -> tuple[int, int]:
        """(instances along the loop axis, independent block groups across it).  A kernel on a
        triangle walks its upper tiles as one sequence (no groups across it)."""
        if self.triangle:
            return self.instances(dims), 1
        counts = self.counts(dims)
        if self.nesting == 1:
            return counts[0], 1
        along, across = (counts[0], counts[1]) if self.loop == "i" else (counts[1], counts[0])
        return along, -(-across // self.span)

    def iterations(self, dims: dict[int, int], target_blocks: int) -> int:
        """Serial iterations: the spec's, or (auto) enough to bring the grid near target_blocks.
        A kernel with nothing to amortise across its loop (no invariant loads, no accumulators)
        runs one instance per slot: many small blocks balance best (docs/design.md, 'Serial iterations')."""
        if self.iters:
            return self.iters
        if not self.carried:
            return 1
        along, across = self._split(dims)
        if self.whole_entries:
            target_blocks = self.one_wave(target_blocks)
        per_group = max(1, target_blocks // across) * self.ipb
        iters = max(1, -(-along // per_group))
        if any(not v.dims for v, _ in self.clears):
            # a sum into one scalar: every block adds its partials to the same address, so at small
            # sizes fewer, longer blocks win (docs/design.md, "Serial iterations")
            iters = max(iters, min(SCALAR_SUM_ITERS, -(-along // self.ipb)))
        return iters

    def iterations_within(self, dims: dict[int, int], blocks: int) -> int:
        """The fewest serial iterations that keep the grid within ``blocks`` blocks."""
        along, across = self._split(dims)
        groups = max(1, blocks // across)
        return max(1, -(-along // (groups * self.ipb)))

    def strip_registers(self, itemsize: int = 4) -> int:
        """Estimated 32-bit registers per thread of a strip kernel: its register entries (two
        registers each at 8-byte entries) plus STRIP_REGISTER_OVERHEAD (and a cluster's, and the
        margin of vector calls on the strips' rows in a loop along i)."""
        return (self.whole_entries * max(1, itemsize // 4) + STRIP_REGISTER_OVERHEAD
                + (CLUSTER_REGISTER_OVERHEAD if self.cluster > 1 else 0)
                + (ROWS_LOOP_I_MARGIN if self.rows_loop_i else 0))

    def one_wave(self, target_blocks: int) -> int:
        """A strip kernel's grid: the blocks resident at once (estimated from its register entries,
        one 32-bit register each plus STRIP_REGISTER_OVERHEAD), out of ``target_blocks`` (two waves
        by threads alone).  Each block adds a whole row's partial results when its loop ends: fewer,
        longer blocks add fewer (docs/design.md, 'Serial iterations')."""
        by_threads = max(1, MAX_THREADS_PER_SM // self.threads)
        sms = max(1, target_blocks // (2 * by_threads))
        return sms * self.strip_blocks_per_sm()

    def strip_blocks_per_sm(self, itemsize: int = 4) -> int:
        """A strip kernel's resident blocks per SM, by threads and by its estimated registers."""
        by_threads = max(1, MAX_THREADS_PER_SM // self.threads)
        by_regs = REGISTERS_PER_SM // (self.threads * self.strip_registers(itemsize))
        return max(1, min(by_threads, by_regs))

    def grid(self, dims: dict[int, int], iters: int) -> int:
        along, across = self._split(dims)
        return max(1, across * -(-along // (iters * self.ipb)))


def upper_tiles(t, n):
    """Tile (I, J) of upper tile number ``t`` (a NumPy array or an int) of an n x n grid of tiles:
    the tiles I <= J numbered row by row (row I holds J = I .. n-1), as the kernel of a call on a
    triangle numbers them (codegen/emit.py: counted from the last tile, row n-1-g starts at
    g (g + 1) / 2, so g is a triangular root)."""
    import numpy as np
    tt = np.asarray(t, dtype=np.int64)
    r = n * (n + 1) // 2 - 1 - tt
    g = ((np.sqrt(8.0 * r + 1.0) - 1.0) * 0.5).astype(np.int64)
    g = np.where(g * (g + 1) // 2 > r, g - 1, g)
    g = np.where((g + 1) * (g + 2) // 2 <= r, g + 1, g)
    i, j = n - 1 - g, n - 1 - (r - g * (g + 1) // 2)
    return (int(i), int(j)) if np.ndim(t) == 0 else (i, j)

