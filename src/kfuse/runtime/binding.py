"""A program bound to one argument signature: everything a call needs that depends only on the
arguments' shapes, dtypes, strides, device and which outputs the caller gives (sizes, launch
shapes and orders, allocation layout, the launches with their argument blocks), built once with
every check.  A call then only patches pointers and scalars into the prepared argument blocks.

Memory: the returned outputs kfuse allocates live in one block per call (outputs cleared to zero
first, so one fill clears them all); values that are neither inputs nor returned live in one
block per stream, kept with the binding and reused by every call on that stream."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..errors import LaunchError
from ..ir.artifact import Artifact
from ..ir.program import Program
from . import driver, modules
from . import csr as csr_inputs
from .args import facts
from .arrays import to_scalar
from .gpu import cupy
from .grids import check_stencils, extents, flat_shapes, grid_shapes
from .launch import KernelLaunch, PackedArgs, pdl_available
from .order import ALTERNATE, launch_orders, launch_shape

AXIS_WORDS = {1: ("length",), 2: ("rows", "columns"), 3: ("rows", "columns", "non-zeros")}
MAX_GRID = 2**31 - 1
FILL_THREADS, FILL_BLOCKS = 256, 1024       # kf_fill: grid-stride loop over the cleared entries
ALIGN = 256

# where a patched pointer or scalar comes from (LANES, LONG: a csr input's row mapping, chosen from
# its row lengths: ``Binding.check_csr``; LSUM .. COUNT: the buffers of its long rows' pre-pass)
IN, OUT, OWN, TMP, SCALAR, LANES, LONG, LSUM, PIECES, PART, COUNT = range(11)
PREPASS = "kf_spmv_long_rows"      # sums a csr matrix's long rows before a kernel that reads it
CSR_PARTS = ("", "#indices", "#data")      # pointer slots of a csr input A: A, A#indices, A#data
RETURNS = "kf_scalars"             # the returned arithmetic, after the kernels (``Returns``)


class Returns(NamedTuple):
    """The returned scalar arithmetic of a plain call, launched by the binding after the program's
    kernels (captured in the same graph; its results in the per-call block beside the outputs, so
    a fed-back loop recycles them with the outputs): ``tail`` the kernel (``control.ScalarTail``),
    ``places[k]`` what its leaf k reads, ("out", k) a program output or ("in", name) a script
    input (a 0-d device array by address, a number by value)."""
    tail: Any
    places: tuple[tuple[str, Any], ...]


def bind_sizes(prog: Program, shapes: dict[str, tuple[int, ...]]) -> dict[int, int]:
    """Dimension id -> size, from the input shapes; every constraint of the script checked."""
    dims: dict[int, int] = {}
    origin: dict[int, str] = {}
    for v in prog.inputs:
        if v.type == "scalar":
            continue
        shape = shapes[v.name]
        for d, size, word in zip(v.dims, shape, AXIS_WORDS[len(v.dims)]):
            dim = prog.dims[d]
            if dim.literal is not None and size != dim.literal:
                raise LaunchError(f"{v.name}: {word} is {size}, the script fixes it to {dim.literal}")
            if d in dims and dims[d] != size:
                raise LaunchError(f"{v.name}: {word} is {size}, but {origin[d]} (both are the script's "
                                  f"size {dim.name})")
            dims[d] = size
            origin[d] = f"{v.name} has {word} {size}"
    for v in prog.values:
        for d in v.dims:
            if d not in dims:
                raise LaunchError(f"the size {prog.dims[d].name} of {v.name} follows from no input")
    return dims


def check_names(prog: Program, inputs: dict, out: dict) -> None:
    names = [v.name for v in prog.inputs]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise LaunchError(f"missing input(s): {', '.join(missing)} (the script's inputs are {', '.join(names)})")
    unknown = [n for n in inputs if n not in names]
    if unknown:
        raise LaunchError(f"unknown input(s): {', '.join(unknown)} (the script's inputs are {', '.join(names)})")
    out_names = [v.name for v in prog.outputs]
    bad = [n for n in out if n not in out_names]
    if bad:
        raise LaunchError(f"out: {', '.join(bad)} is not a returned value ({', '.join(out_names)})")


def check_array(name: str, f, ndim: int, dtype: np.dtype, device: int, first: str = "") -> None:
    shape, dt, strides, dev, _ = f
    if len(shape) != ndim:
        kind = {0: "a scalar (0-d)", 1: "a vector (1-D)", 2: "a matrix (2-D)"}[ndim]
        raise LaunchError(f"{name}: expected {kind} array, got shape {shape}")
    if dt != dtype:
        raise LaunchError(f"{name}: dtype is {dt}, the program was compiled for {dtype} "
                          f"(convert with .astype({dtype.name}) or compile with dtype={dt.name!r})")
    if dev != device:
        raise LaunchError(f"{name} is on GPU {dev} but {first} is on GPU {device}; "
                          "put every array of a call on one GPU")
    expected: list[int] = []
    step = dtype.itemsize
    for n in reversed(shape):
        expected.insert(0, step)
        step *= n
    if any(n > 1 and s != e for n, s, e in zip(shape, strides, expected)):
        raise LaunchError(f"{name}: array is not C-contiguous (row-major); pass a contiguous copy "
                          "(cupy.ascontiguousarray / tensor.contiguous())")
    if ndim and 0 in shape:
        raise LaunchError(f"{name}: array is empty; sizes must be at least 1")


def overlapping(spans: list[tuple[str, int, int]], outputs: set[str]) -> tuple[str, str] | None:
    """The first pair of (name, start, end) spans that overlap where one is an output."""
    for n, (a, s1, e1) in enumerate(spans):
        for b, s2, e2 in spans[n + 1:]:
            if (a in outputs or b in outputs) and s1 < e2 and s2 < e1:
                return a, b
    return None


def _entries(v, dims: dict[int, int]) -> int:
    n = 1
    for d in v.dims:
        n *= dims[d]
    return n


def check_arguments(prog: Program, inputs: dict, out: dict, dtype: np.dtype,
                    device_scalars: frozenset[str] | None = None) -> tuple[int, dict[int, int], dict]:
    """(device, dimension id -> size, name -> ``facts`` of each array input) of a call of ``prog``
    with adapted ``inputs`` and ``out``, every argument checked.  ``device_scalars``: the scalar
    inputs passed as 0-d device arrays (default: those ``prog`` reads by address)."""
    check_names(prog, inputs, out)
    arrays = [v for v in prog.inputs if v.type != "scalar"]
    if not arrays:
        raise LaunchError("a program without array inputs cannot be called (nothing fixes its sizes or device)")
    f = {v.name: csr_inputs.facts_of(inputs[v.name]) if v.type == "csr" else facts(inputs[v.name])
         for v in arrays}
    device = f[arrays[0].name][3]
    for v in arrays:
        if v.type == "csr":
            csr_inputs.check(v.name, inputs[v.name], dtype, device, arrays[0].name)
        else:
            # a vector may come as a 2-D or 3-D array: a grid (runtime/grids.py)
            nd = len(f[v.name][0]) if v.type == "vector" and len(f[v.name][0]) in (2, 3) else len(v.dims)
            check_array(v.name, f[v.name], nd, dtype, device, arrays[0].name)
    for v in prog.inputs:
        if v.on_device if device_scalars is None else v.name in device_scalars:
            # a 0-d device array, read by address in the kernels
            check_array(v.name, facts(inputs[v.name]), 0, dtype, device, arrays[0].name)
        elif v.type == "scalar":
            to_scalar(inputs[v.name], v.name, dtype)
    shapes = {v.name: f[v.name][0] for v in arrays}
    dims = bind_sizes(prog, flat_shapes(prog, shapes))
    grids = grid_shapes(prog, shapes)
    check_stencils(prog, grids)
    for v in prog.outputs:
        if v.name in out:
            name = f"out[{v.name!r}]"
            of = facts(out[v.name])
            want = result_shape(v, dims, grids)
            check_array(name, of, len(want), dtype, device, arrays[0].name)
            if of[0] != want:
                raise LaunchError(f"{name}: shape {of[0]}, expected {want}")
    return device, dims, f


def result_shapes(prog: Program, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Each output's shape, by name, for array inputs of these ``shapes`` (by name; 0-d device
    scalars too), by the program's size rules alone: what a call will return, before any call
    (the fake results of ``kfuse::call`` while torch.compile traces, ``compiler/torchop.py``)."""
    dims = bind_sizes(prog, flat_shapes(prog, shapes))
    grids = grid_shapes(prog, shapes)
    return {v.name: result_shape(v, dims, grids) for v in prog.outputs}


def result_shape(v, dims: dict[int, int], grids: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of a value's array: a vector of a size with a grid shape has that shape."""
    if v.type == "vector" and v.dims[0] in grids:
        return grids[v.dims[0]]
    return tuple(dims[d] for d in v.dims)


class Binding:
    """See the module docstring.  ``inputs`` and ``out`` hold adapted arrays (CuPy or torch)
    and numbers."""

    def __init__(self, artifact: Artifact, inputs: dict, out: dict, pdl: bool | None = None,
                 returns: "Returns | None" = None):
        prog: Program = artifact.program
        self._pdl = pdl             # None: where the device has it (launch.pdl_available)
        # the returned scalar arithmetic, launched as the call's last kernel (``Returns``)
        self.returns = returns
        self.artifact, self.prog = artifact, prog
        self.dtype = dtype = np.dtype(artifact.dtype)
        self.device, self.dims, f = check_arguments(prog, inputs, out, dtype)
        dims = self.dims
        # dimension id -> grid shape (stencils' extents, results' shapes)
        self.grids = grid_shapes(prog, {v.name: f[v.name][0] for v in prog.inputs if v.type != "scalar"})
        self.out_names = sorted(v.name for v in prog.outputs if v.name in out)    # the order calls read them in
        # pointers patched per call: arrays and device scalars, in the order of the script's inputs
        # (a csr input A takes three: its row pointers A, column indices A#indices, values A#data)
        self.array_inputs = [v.name + part for v in prog.inputs if v.type != "scalar" or v.on_device
                             for part in (CSR_PARTS if v.type == "csr" else ("",))]
        self.scalar_inputs = [v.name for v in prog.inputs if v.type == "scalar" and not v.on_device]
        self.nbytes = {v.name: _entries(v, dims) * dtype.itemsize for v in prog.values if v.type != "csr"}
        # csr inputs: name -> [lanes, long_row, then the pointers of the long rows' lsum, pieces,
        # part and count] of the matrix now bound, its long rows' buffers (csr.LongRows or None),
        # the matrices checked (csr.Checks) and the index pointers (row pointers, column indices)
        # of the one now bound (``check_csr``)
        self.csr = [v.name for v in prog.inputs if v.type == "csr"]
        self.csr_mapping: dict[str, list[int]] = {}
        self.csr_checked: dict[str, csr_inputs.Checks] = {n: csr_inputs.Checks() for n in self.csr}
        self.csr_long: dict[str, Any] = {n: None for n in self.csr}
        self.csr_at: dict[str, tuple[int, int]] = {}
        self.csr_wide: dict[str, bool] = {}
        for v in prog.inputs:
            if v.type == "csr":
                rows, _, nnz = (dims[d] for d in v.dims)
                isz = csr_inputs.index_itemsize(inputs[v.name])
                self.nbytes.update({v.name: (rows + 1) * isz, v.name + "#indices": nnz * isz,
                                    v.name + "#data": nnz * dtype.itemsize})
                self.csr_mapping[v.name] = [1, 0, 0, 0, 0, 0]
                self.csr_wide[v.name] = isz == 8
        self.in_nbytes = [self.nbytes[n] for n in self.array_inputs]
        self.out_nbytes = [self.nbytes[n] for n in self.out_names]
        self.tmp_blocks: dict[int, Any] = {}      # stream -> the block of values neither input nor returned
        self.graphs: Any = None                       # executor.Graphs, set by the executor
        self.recycled: list = []      # (stream, block, arrays, base, storage uses) of earlier calls (executor)
        self._layout()
        self._prepare()

    # -- memory ---------------------------------------------------------------------------------
    def _layout(self) -> None:
        """Offsets of kfuse's own outputs in the per-call block and of the other values that reach
        global memory in the per-stream block: zero-cleared values first in each, so that one fill
        clears them."""
        prog, user = self.prog, set(self.out_names)
        cleared = {v.id for code in self.artifact.kernels for v, identity in code.launch.clears
                   if float(identity) == 0.0}
        returned = {v.id for v in prog.outputs}
        own = [v for v in prog.values if v.id in returned and v.name not in user]
        # a value kept on chip (registers, shared memory) in every kernel gets no memory: only
        # those some kernel reads or writes by address (a fused GEMVER's B1 is n x n)
        addressed = {g.value.id for code in self.artifact.kernels for g in code.launch.args
                     if g.kind in ("array", "dscalar") and g.value is not None} | cleared
        tmp = [v for v in prog.values if not v.is_input and v.id not in returned and v.id in addressed]
        self.offsets: dict[int, tuple[int, int]] = {}      # value id -> (OWN or TMP, offset)
        self.own_bytes, self.own_cleared = self._place(own, cleared, OWN)
        self.tmp_bytes, self.tmp_cleared = self._place(tmp, cleared, TMP)
        self.prefilled = {v for v in cleared if v in self.offsets}
        # per returned value: (name, offset in the per-call block or None when given, shape, bytes)
        self.result_layout = [(v.name, None if v.name in user else self.offsets[v.id][1],
                               result_shape(v, self.dims, self.grids), self.nbytes[v.name]) for v in prog.outputs]
        # the returned arithmetic's results: 0-d arrays after the outputs in the per-call block
        item = self.dtype.itemsize
        self.returns_at = self.own_bytes
        if self.returns is not None:
            n = self.returns.tail.code.results
            self.result_layout += [(f"#{k}", self.returns_at + k * item, (), item) for k in range(n)]
            self.own_bytes += -(-n * item // ALIGN) * ALIGN
        self.torch_layout: list | None = None      # result_layout for a torch block (executor._torch_layout)

    def _place(self, values, cleared: set[int], where: int) -> tuple[int, int]:
        total = 0
        ordered = [v for v in values if v.id in cleared] + [v for v in values if v.id not in cleared]
        n_cleared = 0
        for v in ordered:
            self.offsets[v.id] = (where, total)
            total += -(-self.nbytes[v.name] // ALIGN) * ALIGN
            if v.id in cleared:
                n_cleared = total
        return total, n_cleared

    # -- launches -------------------------------------------------------------------------------
    def _source(self, v) -> tuple[int, int]:
        """(IN / OUT / OWN / TMP, index or offset) of an array value's pointer."""
        if v.is_input:
            return IN, self.array_inputs.index(v.name)
        if v.name in self.out_names and any(o.id == v.id for o in self.prog.outputs):
            return OUT, self.out_names.index(v.name)
        return self.offsets[v.id]

    def _fill(self, fill_fn, blocks: list[tuple[tuple[int, int], int]], value: float, dependent: bool = False):
        """One kf_fill launch setting one or two blocks [(source, bytes)] to ``value``."""
        (src1, b1), (src2, b2) = (blocks + [((IN, 0), 0)])[:2]
        n, n2 = b1 // self.dtype.itemsize, b2 // self.dtype.itemsize
        packed = PackedArgs((0, np.int64(n), 0, np.int64(n2), self.dtype.type(value)))
        launch = KernelLaunch(fill_fn, min(-(-(n + n2) // FILL_THREADS), FILL_BLOCKS), FILL_THREADS, packed,
                              "kf_fill", dependent)
        return launch, [(packed.values[0], *src1)] + ([(packed.values[2], *src2)] if n2 else [])

    def _prepare(self) -> None:
        artifact, dims, device = self.artifact, self.dims, self.device
        cp = cupy()
        with cp.cuda.Device(device):
            pdl = pdl_available(device) if self._pdl is None else self._pdl and pdl_available(device)
            orders = launch_orders(artifact, dims, device, pdl)
            functions = modules.functions(artifact, device, orders)
            fill_fn = modules.fill_function(artifact, device, orders) if (self.own_cleared or self.tmp_cleared or any(
                code.launch.clears for code in artifact.kernels)) else None
            shape = launch_shape(artifact, dims, device)
        driver.require()
        # per kernel: the csr matrices it reads whose long rows a pre-pass may sum
        long_reads = [self._long_reads(code) if self.csr else [] for code in artifact.kernels]
        long_fn = modules.module(artifact, device, orders).get_function(PREPASS) if any(long_reads) else None
        # per kernel: its fills, its csr matrices' pre-passes (csr name, args, patches) and itself
        self._parts: list[tuple[list, list, KernelLaunch, list]] = []
        self.fills_before: list[list[str]] = []      # per kernel: names of what its fills clear
        pre = []        # (source, bytes, value) of each fill
        if self.own_cleared:
            pre.append(((OWN, 0), self.own_cleared, 0.0))
        if self.tmp_cleared:
            pre.append(((TMP, 0), self.tmp_cleared, 0.0))
        for k, ((_, iters), code, function) in enumerate(zip(shape, artifact.kernels, functions)):
            L = code.launch
            wanted = (list(pre) if k == 0 else []) + [(self._source(v), self.nbytes[v.name], float(identity))
                                                      for v, identity in L.clears if v.id not in self.prefilled]
            groups: list[tuple[list, float]] = []      # two blocks of one value per launch
            for source, nbytes, value in wanted:
                if groups and groups[-1][1] == value and len(groups[-1][0]) < 2:
                    groups[-1][0].append((source, nbytes))
                else:
                    groups.append(([(source, nbytes)], value))
            # a fill after a fill launches early (PDL): it finishes after the one before it
            fills = [self._fill(fill_fn, blocks, value, dependent=pdl and n > 0)
                     for n, (blocks, value) in enumerate(groups)]
            self.fills_before.append([f[0].name for f in fills])
            if L.cluster > 1:
                iters = self._cluster_iterations(L, function, iters)
            args, patches = self._kernel_args(L, iters)
            grid = L.grid(dims, iters)
            if grid > MAX_GRID:
                raise LaunchError(f"{L.kernel}: {grid} blocks exceed the grid limit; raise serial iterations")
            packed = PackedArgs(tuple(args))
            # launched early: after its fills (it waits for them before it touches what they clear,
            # or at its end when it touches none: they clear the outputs of later kernels), and
            # after the kernel before it where it reads what that one wrote (it waits before)
            dependent = bool(pdl and (fills or (k > 0 and L.waits)))
            launch = KernelLaunch(function, grid, L.threads, packed, L.kernel, dependent)
            passes = [(long_fn, name, *self._prepass_args(A, x)) for name, A, x in long_reads[k]]
            self._parts.append((fills, passes, launch,
                                [(packed.values[i], src, a) for i, src, a in patches]))
        if self.returns is not None:
            self._parts.append(([], [], *self._returns_launch()))
        self.flip = 0
        # calls alternate between the chosen orders and their mirror where the kernels were built
        # for it (runtime/order.py, bit 3)
        self.alternate = int(any(o & ALTERNATE for o in orders))
        self.parity = 1
        self._compose()

    def _compose(self) -> None:
        """The launches of a call, for the matrices now bound: each kernel after its fills and
        after a pre-pass summing the long rows (``kf_spmv_long_rows``, a block per piece) of each
        csr matrix it reads that has them; such a kernel waits for it (it is not launched early)."""
        self.launches: list[tuple[KernelLaunch, list]] = []
        for fills, passes, launch, patches in self._parts:
            self.launches.extend(fills)
            long = [(fn, packed, ps, self.csr_long[name]) for fn, name, packed, ps in passes if self.csr_long[name]]
            for fn, packed, ps, buffers in long:
                self.launches.append((KernelLaunch(fn, buffers.grid, 256, packed, PREPASS), ps))
            self.launches.append((launch.independent() if long and launch.dependent else launch, patches))
        self.patches = [p for _, ps in self.launches for p in ps]
        self.kernel_launches = [launch for launch, _ in self.launches
                                if launch.name not in ("kf_fill", PREPASS, RETURNS)]
        # every kernel's kf_flip (its last argument; a launch made again shares its argument block,
        # which holds the flip already)
        self.flips = [launch.args.values[-1] for launch in self.kernel_launches]

    def _returns_launch(self) -> tuple[KernelLaunch, list]:
        """kf_scalars (``Returns``) after the kernels, and its patches: it writes the results
        (``returns_at`` in the per-call block) from the outputs and scalar inputs it reads, a
        script input given as a number by value."""
        assert self.returns is not None
        tail, places = self.returns.tail, self.returns.places
        numbers = tuple(p[0] == "in" and p[1] in self.scalar_inputs for p in places)
        fn = tail.function(self.device, numbers)
        item = self.dtype.itemsize
        args: list = [0] * tail.code.results
        patches = [(k, OWN, self.returns_at + k * item) for k in range(tail.code.results)]
        for (where, x), number in zip(places, numbers):
            if number:
                patches.append((len(args), SCALAR, self.scalar_inputs.index(x)))
                args.append(self.dtype.type(0))
            else:
                v = self.prog.outputs[x] if where == "out" else next(v for v in self.prog.inputs if v.name == x)
                patches.append((len(args), *self._source(v)))
                args.append(0)
        packed = PackedArgs(tuple(args))
        return KernelLaunch(fn, 1, 1, packed, RETURNS), [(packed.values[i], src, a) for i, src, a in patches]

    @staticmethod
    def _long_reads(code) -> list[tuple[str, Any, Any]]:
        """(name, matrix, vector) of each csr input a kernel reads through ``spmv_rows``, whose
        long rows are summed before the kernel."""
        out = []
        for kc in code.spec.calls:
            for r in kc.variant.computes:
                if r.fn == "spmv_rows":
                    A, x = (kc.call.bindings()[a.name] for a in r.args if a.kind == "global")
                    out.append((A.name, A, x))
        return out

    def _prepass_args(self, A, x) -> tuple[PackedArgs, list]:
        """The argument block of the pre-pass of matrix ``A`` read with vector ``x``, and its patches
        (kf_spmv_long_rows: indices, values, wide, x, entries of x, pieces, part, count, lsum)."""
        src, slot = self._source(A)
        c = self.csr.index(A.name)
        args = [0, 0, np.int32(self.csr_wide[A.name]), 0, np.int64(self.dims[x.dims[0]]), 0, 0, 0, 0]
        patches = [(0, src, slot + 1), (1, src, slot + 2), (3, *self._source(x)),
                   (5, PIECES, c), (6, PART, c), (7, COUNT, c), (8, LSUM, c)]
        packed = PackedArgs(tuple(args))
        return packed, [(packed.values[i], s, a) for i, s, a in patches]

    def _cluster_iterations(self, L, function, iters: int) -> int:
        """Serial iterations of a kernel of clusters: at least enough that its grid is clusters
        the GPU holds at once (its strips are shared out among the block groups: a group that
        had to wait for a free processing cluster would run its share after the others)."""
        held = driver.max_active_clusters(function, L.threads, L.cluster)
        if held < 1:
            raise LaunchError(f"{L.kernel}: the GPU cannot hold a cluster of {L.cluster} blocks of "
                              f"{L.threads} threads")
        return max(iters, L.iterations_within(self.dims, held * L.cluster))

    def _kernel_args(self, L, iters: int) -> tuple[list, list]:
        """The argument values (pointers as 0, patched per call) and the patches [(position,
        source, index)]."""
        args: list = []
        patches: list = []
        for g in L.args:
            if g.kind == "array" and g.value.type == "csr":
                # row pointers, column indices, values; rows, cols, nnz; wide, lanes, long_row
                src, slot = self._source(g.value)
                for k in range(3):
                    patches.append((len(args), src, slot + k))
                    args.append(0)
                args.extend(np.int64(self.dims[d]) for d in g.value.dims)
                args.append(np.int32(self.csr_wide[g.value.name]))
                patches.append((len(args), LANES, self.csr.index(g.value.name)))
                args.append(np.int32(1))
                patches.append((len(args), LONG, self.csr.index(g.value.name)))
                args.append(np.int64(0))
                patches.append((len(args), LSUM, self.csr.index(g.value.name)))
                args.append(0)
            elif g.kind == "array":
                patches.append((len(args), *self._source(g.value)))
                args.append(0)
                if g.value.type != "scalar":
                    args.extend(np.int64(self.dims[d]) for d in g.value.dims)
            elif g.kind == "dscalar":         # a scalar an earlier kernel computed: its address
                patches.append((len(args), *self._source(g.value)))
                args.append(0)
            elif g.kind == "scalar":
                patches.append((len(args), SCALAR, self.scalar_inputs.index(g.value.name)))
                args.append(self.dtype.type(0))
            elif g.kind == "count":
                args.append(np.int64(g.count(self.dims)))
            elif g.kind == "grid":          # a stencil's grid extents (check_stencils: it has them)
                args.extend(np.int64(e) for e in extents(self.grids[g.value.dims[0]]))
        args.append(np.int32(min(iters, 2**31 - 1)))
        args.append(np.int32(0))                  # kf_flip: set per call (``set_flip``)
        return args, patches

    @property
    def launch_count(self) -> int:
        return len(self.launches)

    def patch(self, in_ptrs, out_ptrs, own: int, tmp: int, scalars) -> None:
        """Write this call's pointers and scalars into the prepared argument blocks."""
        for obj, src, a in self.patches:
            if src == IN:
                obj.value = in_ptrs[a]
            elif src == OWN:
                obj.value = own + a
            elif src == TMP:
                obj.value = tmp + a
            elif src == OUT:
                obj.value = out_ptrs[a]
            elif src == SCALAR:
                obj.value = scalars[a]
            else:
                obj.value = self.csr_mapping[self.csr[a]][src - LANES]

    def pointers(self, inputs: dict) -> list[int]:
        """The pointers of the array inputs (``array_inputs``' slots) of adapted ``inputs``."""
        out = []
        for v in self.prog.inputs:
            if v.type == "csr":
                out += csr_inputs.pointers(inputs[v.name])
            elif v.type != "scalar" or v.on_device:
                out.append(facts(inputs[v.name])[4])
        return out

    def check_csr(self, inputs: dict, in_ptrs) -> None:
        """Before a call: the structure of each csr input checked and its row mapping set, where its
        matrix was not checked before: its index arrays' pointers are new, or the matrix checked at
        them is gone (``csr.Checks``; ``runtime/csr.py``); ``inputs`` as the caller gave them."""
        for name in self.csr:
            slot = self.array_inputs.index(name)
            at = (in_ptrs[slot], in_ptrs[slot + 1])
            known = self.csr_checked[name]
            got = known.get(at)
            if got is not None and self.csr_at.get(name) == at:
                continue
            if got is None:
                c = csr_inputs.adapt_csr(inputs[name], name)
                got = csr_inputs.validate(name, c, self.device, self.dtype)
                if known.put(at, csr_inputs.owners(inputs[name]), got) and self.graphs is not None:
                    self.graphs.execs.clear()   # captured graphs may hold a dropped matrix's mapping and buffers
            long, before = got.long, self.csr_long[name]
            self.csr_mapping[name][:] = [got.lanes, got.long_row] + (
                [facts(a)[4] for a in (long.lsum, long.pieces, long.part, long.count)] if long else [0, 0, 0, 0])
            self.csr_long[name] = long
            self.csr_at[name] = at
            if long is not before:
                self._compose()

    def set_flip(self, flip: int) -> None:
        """Mirror (1) or keep (0) every kernel's block order in the launches from now on: the
        executor alternates calls, so that a call starts on the data the call before it touched
        last (runtime/order.py)."""
        if flip != self.flip:
            for v in self.flips:
                v.value = flip
            self.flip = flip

    def launch_all(self, stream: int) -> None:
        for launch, _ in self.launches:
            launch.launch(stream)
