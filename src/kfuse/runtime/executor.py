"""Run a compiled program: check arguments, bind sizes, allocate, clear, launch."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LaunchError
from ..ir.program import Program
from .arrays import check_array, check_no_overlap, to_cupy, to_scalar
from .gpu import cupy
from .launch import PackedArgs, launch_dependent, pdl_available
from .order import launch_orders, launch_shape

AXIS_WORDS = {1: ("length",), 2: ("rows", "columns")}
MAX_GRID = 2**31 - 1
FILL_THREADS, FILL_BLOCKS = 256, 1024       # kf_fill: grid-stride loop over the cleared entries


@dataclass
class Launch:
    """One kernel of a bound call, with the fills that clear its reduced outputs first."""
    function: object
    grid: int
    threads: int
    args: tuple
    fills: list            # (array, entries, value) for kf_fill, launched before the kernel
    name: str
    packed: PackedArgs | None = None     # set: launched dependent on the launch before it (PDL)


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


class BoundCall:
    """A program bound to its arguments: everything checked and allocated, launches prepared.

    Calling it clears the reduced outputs and launches the kernels (no checks, no allocation),
    returning the outputs; the same output arrays are reused by every call.
    """

    def __init__(self, compiled, inputs: dict, out: dict | None = None):
        cp = cupy()
        prog: Program = compiled.program
        dtype = np.dtype(compiled.dtype)
        device = cp.cuda.Device().id
        out = dict(out or {})
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

        arrays: dict[int, object] = {}
        scalars: dict[int, object] = {}
        named: dict[str, object] = {}
        for v in prog.inputs:
            if v.type == "scalar":
                scalars[v.id] = to_scalar(inputs[v.name], v.name, dtype)
                continue
            arr = to_cupy(inputs[v.name], v.name)
            check_array(arr, v.name, len(v.dims), dtype, device)
            arrays[v.id] = named[v.name] = arr
        dims = bind_sizes(prog, {v.name: tuple(arrays[v.id].shape) for v in prog.inputs if v.type != "scalar"})

        returned = {v.id for v in prog.outputs}
        # reduced outputs that kfuse allocates and clears to zero share one buffer, cleared by one
        # fill before the first kernel (no kernel reads an output of a later one); a clear costs
        # about as much as a launch (H100: docs/experiments/README.md, 'Clears of reduced outputs')
        user = {v.id for v in prog.outputs if v.name in out}
        by_id = {v.id: v for v in prog.values}
        offsets: dict[int, tuple[int, int]] = {}
        total = 0
        for code in compiled.kernels:
            for v, identity in code.launch.clears:
                if float(identity) == 0.0 and v.id not in user and v.id not in offsets:
                    n = 1
                    for d in by_id[v.id].dims:
                        n *= dims[d]
                    offsets[v.id] = (total, n * dtype.itemsize)
                    total += -(-n * dtype.itemsize // 256) * 256
        pool = cp.empty(total, dtype=np.uint8) if total else None
        for v in prog.values:
            if v.is_input:
                continue
            shape = tuple(dims[d] for d in v.dims)
            if v.id in returned and v.name in out:
                arr = to_cupy(out[v.name], f"out[{v.name!r}]")
                if v.type == "scalar":
                    if arr.shape not in ((), (1,)) or arr.dtype != dtype or not arr.flags.c_contiguous:
                        raise LaunchError(f"out[{v.name!r}]: a scalar result needs a {dtype} array of shape ()")
                else:
                    check_array(arr, f"out[{v.name!r}]", len(shape), dtype, device)
                    if tuple(arr.shape) != shape:
                        raise LaunchError(f"out[{v.name!r}]: shape {tuple(arr.shape)}, expected {shape}")
                named[f"out[{v.name!r}]"] = arr
            elif v.id in offsets:
                off, nbytes = offsets[v.id]
                arr = pool[off:off + nbytes].view(dtype).reshape(shape)
            else:
                arr = cp.empty(shape, dtype=dtype)
            arrays[v.id] = arr
        check_no_overlap(named, {k for k in named if k.startswith("out[")})

        self.dims = dims
        self.launches: list[Launch] = []
        pdl = pdl_available(device)
        # the order of each kernel's blocks, compiled in (runtime/order.py): once per size and device
        orders = launch_orders(compiled, dims, device, pdl)
        fill = (compiled.fill_function(device, orders) if any(code.launch.clears for code in compiled.kernels)
                else None)
        shape = launch_shape(compiled, dims, device)
        for (_, iters), code, function in zip(shape, compiled.kernels, compiled.functions(device, orders)):
            L = code.launch
            clears = [(arrays[v.id], float(identity)) for v, identity in L.clears if v.id not in offsets]
            if pool is not None and not self.launches:      # the shared buffer, before the first kernel
                clears.insert(0, (pool.view(dtype), 0.0))
            fills = [(arr, np.int64(arr.size), dtype.type(identity)) for arr, identity in clears]
            args = []
            for g in L.args:
                if g.kind == "array":
                    arr = arrays[g.value.id]
                    args.append(arr)
                    if g.value.type != "scalar":
                        args.extend(np.int64(s) for s in arr.shape)
                elif g.kind == "scalar":
                    args.append(scalars[g.value.id])
                elif g.kind == "count":
                    args.append(np.int64(-(-dims[g.axis] // g.divisor)))
            args.append(np.int32(min(iters, 2**31 - 1)))
            grid = L.grid(dims, iters)
            if grid > MAX_GRID:
                raise LaunchError(f"{L.kernel}: {grid} blocks exceed the grid limit; raise serial iterations")
            args = tuple(args)
            # after a fill or another kernel, a kernel starts at once and waits for it where it
            # first touches a cleared output or what an earlier kernel wrote; one with no wait of
            # its own (reading only script inputs, clearing nothing) starts after it as usual
            packed = PackedArgs(args) if pdl and (fills or self.launches) and L.waits else None
            self.launches.append(Launch(function, grid, L.threads, args, fills, L.kernel, packed))
        self.fill = fill
        result = tuple(arrays[v.id] for v in prog.outputs)
        self.result = result[0] if len(result) == 1 else result
        self.arrays = arrays

    @property
    def launch_count(self) -> int:
        """Launches per call: the kernels and the fills clearing their reduced outputs."""
        return sum(1 + len(L.fills) for L in self.launches)

    def __call__(self, sync: bool = False):
        cp = cupy()
        for L in self.launches:
            try:
                for arr, n, value in L.fills:
                    self.fill((min(-(-int(n) // FILL_THREADS), FILL_BLOCKS),), (FILL_THREADS,), (arr, n, value))
                if L.packed is not None:
                    launch_dependent(L.function, L.grid, L.threads, L.packed, L.name)
                else:
                    L.function((L.grid,), (L.threads,), L.args)
            except cp.cuda.driver.CUDADriverError as e:
                raise LaunchError(f"launch of {L.name} (grid {L.grid}, block {L.threads}) failed: {e}") from None
        if sync:
            try:
                cp.cuda.get_current_stream().synchronize()
            except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as e:
                raise LaunchError(f"kernel execution failed: {e}") from None
        return self.result


def run(compiled, inputs: dict, out: dict | None = None, sync: bool = False):
    return BoundCall(compiled, inputs, out)(sync=sync)
