"""Calling a compiled program: the plain call ``prog(**inputs)`` and the bound call ``prog.bind``.

The first call with a new argument signature (shapes, dtypes, strides, device, which outputs are
given; ``args.signature``) builds a ``Binding`` with every check; a later call with the same
signature finds it in a table, reads the arguments' pointers, takes its outputs from the memory
pool of the caller's framework (CuPy in, CuPy out; torch in, torch out), patches pointers and
scalars into the prepared argument blocks and launches on the caller's stream (torch's current
stream with torch tensors, CuPy's otherwise, or ``stream=``).  A scalar input given as a 0-d
device array is patched like an array (its pointer: the kernels read it by address); the
signature says which scalars come so.  The binding asks the compiler once which artifact a call
at its sizes, with those scalars on the device, runs (``ir/artifact.Resolve``, handed over by the
compiled script: the runtime's one question to the compiler; planning stays behind it).

A loop whose outputs feed its inputs (``x, r = step(A, x, r)``) drops the results of the call
before last: the binding keeps the blocks and CuPy arrays of its last few calls and reuses one
whose arrays nobody else holds (``_unused``), so such a loop allocates nothing, builds no arrays
and meets the same few pointer sets, whose graphs replay.  A raw pointer kept without the array
(``x.data.ptr``) does not hold it; a view, slice or DLPack capsule of it does.

Launches replay from a CUDA graph when a program makes several launches and the same pointers and
scalars come again (a loop over the same arrays): the launches are captured once on a private
stream, and the graph is launched on the caller's stream.  Inside a caller's own stream capture
(``torch.cuda.graph``, CuPy stream capture) the launches are made directly and get captured;
nothing synchronises and nothing but the caller's framework allocates.
"""
from __future__ import annotations

import sys
from collections import OrderedDict
from sys import getrefcount

import numpy as np

from ..errors import LaunchError
from ..ir.artifact import Resolve
from ..ir.program import Program
from . import driver
from .args import adapt, current_stream, facts, on_device, torch_dtype, torch_tensor_type
from .arrays import to_scalar
from . import csr as csr_inputs
from .binding import OUT, Binding, Returns, check_arguments, check_names, overlapping
from .gpu import cupy

GRAPHS_PER_BINDING = 8        # captured graphs kept per binding (least recently used dropped)
RECYCLED = 3                  # result blocks kept per binding for reuse once their arrays are dropped
RESERVED = ("out", "sync", "stream")


class Graphs:
    """Captured launch sequences of one binding, keyed by stream, pointers and scalars: a key is
    captured the second time it comes (a loop over the same arrays), and replayed after."""

    def __init__(self):
        self.execs: OrderedDict = OrderedDict()
        self.seen: set = set()
        self.failed = False

    def should_capture(self, key) -> bool:
        if self.failed:
            return False
        if key in self.seen:
            return True
        if len(self.seen) > 64:
            self.seen.clear()
        self.seen.add(key)
        return False

    def capture(self, key, binding: Binding, stream: int, capture_stream: int) -> bool:
        """Capture the (patched) launches on the private stream and launch the graph on
        ``stream``; False when the driver refuses (the caller launches directly)."""
        try:
            g = driver.GraphExec(capture_stream, binding.launch_all)
        except LaunchError:
            self.failed = True         # e.g. a driver that cannot capture these launches
            return False
        self.execs[key] = g
        if len(self.execs) > GRAPHS_PER_BINDING:
            self.execs.popitem(last=False)
        g.launch(stream)
        return True


class Executor:
    """The call path of one program (``program``, compiled for ``dtype``): ``resolve`` gives the
    artifact a call at given sizes and device scalars runs."""

    def __init__(self, program: Program, dtype: str, resolve: Resolve):
        self.program, self.resolve = program, resolve
        self.names = [v.name for v in program.inputs]
        self.kinds = [v.type == "scalar" for v in program.inputs]
        self.sparse = [v.type == "csr" for v in program.inputs]
        self.dtype = np.dtype(dtype)
        self.bindings: dict = {}
        self._capture: dict[int, int] = {}      # device -> private capture stream
        # the returned scalar arithmetic (binding.Returns), launched after the kernels of a call
        # that gives no outputs; its results follow the outputs in what ``call`` returns
        self.returns: Returns | None = None

    # -- the plain call -----------------------------------------------------------------------------
    def call(self, inputs: dict, out: dict | None, sync: bool, stream):
        cp = cupy()
        key, ptrs, scalars, torch_in = self._read(inputs, out, cp)
        binding = self.bindings.get(key) if key is not None else None
        if binding is None:
            binding, arrays, scalars, torch_in = self._bind(inputs, out, key)
            ptrs = arrays + [facts(adapt((out or {})[n], n))[4] for n in binding.out_names]
        n_in = len(binding.array_inputs)
        in_ptrs, out_ptrs = ptrs[:n_in], ptrs[n_in:]
        if binding.csr:
            binding.check_csr(inputs, in_ptrs)
        if out_ptrs:
            self._check_overlap(binding, in_ptrs, out_ptrs)
        s = self.stream_of(stream, binding.device, torch_in)
        reused = _unused(binding.recycled, s) if binding.own_bytes and not out else None
        if reused is not None:
            own, block = reused[3], None
        else:
            own, block = self._allocate(binding, torch_in, cp)
        tmp = self._temporaries(binding, s, cp) if binding.tmp_bytes else 0
        self._launch(binding, s, in_ptrs, out_ptrs, own, tmp, scalars)
        if sync:
            driver.synchronize(s)
        if reused is not None:
            arrays = reused[2]
            return arrays[0] if len(arrays) == 1 else tuple(arrays)
        result = self._result(binding, block, out)
        if binding.own_bytes and not out and len(binding.recycled) < RECYCLED:
            arrays = list(result) if isinstance(result, tuple) else [result]
            binding.recycled.append((s, block, arrays, own, _storage_uses(block, torch_in)))
        return result

    def _read(self, inputs: dict, out, cp):
        """(signature key, pointers of the array inputs then of the given outputs, scalar values,
        torch?) of a call, or a None key when something needs the slow path."""
        if len(inputs) != len(self.names):
            return None, None, None, False
        ptrs: list = []
        scalars: list = []
        keys: list = []
        tensor = torch_tensor_type()
        torch_in = False
        ndarray = cp.ndarray
        try:
            for name, is_scalar, sparse in zip(self.names, self.kinds, self.sparse):
                x = inputs[name]
                if sparse:
                    got = csr_inputs.fast_key(x)
                    if got is None:
                        return None, None, None, False
                    keys.append(got[0])
                    ptrs.extend(got[1])
                    torch_in = torch_in or got[2]
                    continue
                if is_scalar:
                    if type(x) is float or type(x) is int:
                        scalars.append(x)
                        continue
                    if type(x) is ndarray and x.ndim == 0:         # a device scalar: by address
                        d = x.data
                        keys.append(("dscalar", x.dtype, d.device_id))
                        ptrs.append(d.ptr)
                        continue
                    if tensor is not None and isinstance(x, tensor) and x.dim() == 0 and x.is_cuda:
                        keys.append(("dscalar", x.dtype, x.device))
                        ptrs.append(x.data_ptr())
                        torch_in = True
                        continue
                    return None, None, None, False
                if type(x) is ndarray:
                    d = x.data
                    keys.append((x.shape, x.dtype, x.strides, d.device_id))
                    ptrs.append(d.ptr)
                elif tensor is not None and isinstance(x, tensor):
                    keys.append((x.shape, x.dtype, x.stride(), x.device))
                    ptrs.append(x.data_ptr())
                    torch_in = True
                else:
                    return None, None, None, False
            if out:
                for name in sorted(out):
                    x = out[name]
                    if type(x) is ndarray:
                        d = x.data
                        keys.append((name, x.shape, x.dtype, x.strides, d.device_id))
                        ptrs.append(d.ptr)
                    elif tensor is not None and isinstance(x, tensor):
                        keys.append((name, x.shape, x.dtype, x.stride(), x.device))
                        ptrs.append(x.data_ptr())
                    else:
                        return None, None, None, False
        except KeyError:
            return None, None, None, False
        return tuple(keys), ptrs, scalars, torch_in

    def bind(self, inputs: dict, outs: dict, pdl: bool | None = None) -> Binding:
        """A binding of the program to ``inputs`` and the given outputs ``outs`` (every argument
        adapted and checked, the artifact resolved for their sizes), kept by no table: for a
        caller that patches its pointers itself (a device loop's steps, ``runtime/loop.py``).
        ``pdl=False``: launches without programmatic dependence."""
        return self._bind(inputs, outs, None, pdl, returns=False)[0]

    def _bind(self, inputs: dict, out, key, pdl: bool | None = None, returns: bool = True):
        """The slow path: every argument adapted and checked, a binding built (and kept when the
        call had a signature).  ``pdl=False``: launches without programmatic dependence (for
        graphs whose nodes cannot take it)."""
        check_names(self.program, inputs, out or {})
        adapted, device_scalars = {}, []
        cp = cupy()
        for name, x in inputs.items():
            is_scalar = name in self.names and self.kinds[self.names.index(name)]
            if name in self.names and self.sparse[self.names.index(name)]:
                adapted[name] = csr_inputs.adapt_csr(x, name)
            elif is_scalar and on_device(x, cp):
                device_scalars.append(name)
                adapted[name] = adapt(x, name)
            else:
                adapted[name] = x if is_scalar else adapt(x, name)
        out_adapted = {n: adapt(x, f"out[{n!r}]") for n, x in (out or {}).items()}
        # every argument checked, the sizes known: the artifact this call runs, then its binding
        scalars_on_device = frozenset(device_scalars)
        _, dims, _ = check_arguments(self.program, adapted, out_adapted, self.dtype, scalars_on_device)
        binding = Binding(self.resolve(dims, scalars_on_device), adapted, out_adapted, pdl,
                          self.returns if returns and not out_adapted else None)
        binding.graphs = Graphs()
        if key is not None:
            self.bindings[key] = binding
        arrays = binding.pointers(adapted)
        scalars = [float(to_scalar(adapted[n], n, self.dtype)) for n in binding.scalar_inputs]
        tensor = torch_tensor_type()
        torch_in = tensor is not None and any(isinstance(a, tensor) for v in self.program.inputs if v.type != "scalar"
                                              for a in (adapted[v.name][:3] if v.type == "csr" else (adapted[v.name],)))
        return binding, arrays, scalars, torch_in

    def stream_of(self, stream, device: int, torch_in: bool) -> int:
        if stream is not None:
            if isinstance(stream, int):
                return stream
            for attr in ("ptr", "cuda_stream"):
                if hasattr(stream, attr):
                    return int(getattr(stream, attr))
            raise LaunchError(f"stream: expected a CuPy or torch stream or a raw handle, got {type(stream).__name__}")
        return current_stream(torch_in, device)

    def _check_overlap(self, binding: Binding, in_ptrs, out_ptrs) -> None:
        ends = [p + n for p, n in zip(in_ptrs, binding.in_nbytes)] + [p + n for p, n in zip(out_ptrs, binding.out_nbytes)]
        starts = in_ptrs + out_ptrs
        n_in = len(in_ptrs)
        for j in range(n_in, len(starts)):
            s, e = starts[j], ends[j]
            for i in range(len(starts)):
                if i != j and starts[i] < e and s < ends[i]:
                    break
            else:
                continue
            break
        else:
            return
        spans = [(n, p, p + binding.nbytes[n]) for n, p in zip(binding.array_inputs, in_ptrs)]
        spans += [(f"out[{n!r}]", p, p + binding.nbytes[n]) for n, p in zip(binding.out_names, out_ptrs)]
        hit = overlapping(spans, {f"out[{n!r}]" for n in binding.out_names})
        if hit:
            raise LaunchError(f"{hit[0]} and {hit[1]} share memory; an output must not alias another argument")

    def _allocate(self, binding: Binding, torch_in: bool, cp):
        """(base pointer, block) of this call's own outputs, from the caller's framework's pool."""
        if not binding.own_bytes:
            return 0, None
        if torch_in:
            # a block of the element type: each result is one as_strided of it (``_result``)
            torch = sys.modules["torch"]
            block = torch.empty(binding.own_bytes // binding.dtype.itemsize, dtype=torch_dtype(binding.dtype),
                                device=f"cuda:{binding.device}")
            return block.data_ptr(), block
        if cp.cuda.runtime.getDevice() != binding.device:
            with cp.cuda.Device(binding.device):
                block = cp.cuda.alloc(binding.own_bytes)
        else:
            block = cp.cuda.alloc(binding.own_bytes)
        return block.ptr, block

    def _temporaries(self, binding: Binding, stream: int, cp) -> int:
        if not binding.tmp_bytes:
            return 0
        blocks = binding.tmp_blocks
        block = blocks.get(stream)
        if block is None:
            with cp.cuda.Device(binding.device):
                block = blocks[stream] = cp.cuda.alloc(binding.tmp_bytes)
        return block.ptr

    def _launch(self, binding: Binding, stream: int, in_ptrs, out_ptrs, own: int, tmp: int, scalars) -> None:
        """Replay from a graph when the binding makes several launches and this key came before
        (and the stream is not being captured by the caller); else patch and launch directly.
        Every other call walks every kernel's blocks in the mirrored order (``Binding.set_flip``):
        in a loop over one matrix each call then starts on the part the call before left in L2
        (docs/design.md, 'Calls alternating the mirrored order')."""
        binding.parity ^= 1
        flip = binding.parity & binding.alternate
        if binding.launch_count > 1:
            graphs = binding.graphs
            key = (stream, flip, *in_ptrs, *out_ptrs, own, *scalars)
            g = graphs.execs.get(key)
            if g is not None and not driver.is_capturing(stream):
                graphs.execs.move_to_end(key)
                g.launch(stream)
                return
            binding.set_flip(flip)
            binding.patch(in_ptrs, out_ptrs, own, tmp, scalars)
            if g is None and graphs.should_capture(key) and not driver.is_capturing(stream):
                if graphs.capture(key, binding, stream, self._capture_stream(binding.device)):
                    return
        else:
            binding.set_flip(flip)
            binding.patch(in_ptrs, out_ptrs, own, tmp, scalars)
        binding.launch_all(stream)

    def _capture_stream(self, device: int) -> int:
        s = self._capture.get(device)
        if s is None:
            with cupy().cuda.Device(device):
                s = self._capture[device] = driver.create_stream()
        return s

    def _result(self, binding: Binding, block, out):
        if isinstance(block, cupy().cuda.MemoryPointer):
            dtype = binding.dtype
            results = [out[name] if off is None else cupy().ndarray(shape, dtype, block + off)
                       for name, off, shape, _ in binding.result_layout]
        else:       # torch: one as_strided of the typed block a result (a slice and two views took 3 ops)
            results = [out[name] if off is None else block.as_strided(shape, strides, off)
                       for name, off, shape, strides in _torch_layout(binding)]
        return results[0] if len(results) == 1 else tuple(results)


def _unused(recycled: list, stream: int):
    """A kept (stream, block, arrays, base pointer, storage uses) of an earlier call on ``stream``
    whose arrays nobody holds any more (the fed-back loop: the results of the call before last),
    or None.  Reusing its block and its arrays spares the allocation and the arrays' construction,
    and gives the loop the same few pointer sets, so that its graphs replay.

    A CuPy result is held by a name (its reference count) or by a view or slice of it (which
    holds it as its ``base``).  A torch view holds the block's storage, not the result: a torch
    block is free when no result has another name, none is held from C++ (a DLPack capsule, which
    holds the tensor: ``_use_count``), and its storage has no user beyond the block and the
    results (``_storage_Use_Count`` as it was when they were made)."""
    for item in recycled:
        if item[0] == stream:
            for a in item[2]:
                if getrefcount(a) > 3:       # the list, this loop's name and the call's argument
                    break
            else:
                uses = item[4]
                if uses is None:
                    return item
                torch = sys.modules["torch"]
                if torch._C._storage_Use_Count(uses[0]) == uses[1] and all(a._use_count() == 1 for a in item[2]):
                    return item
    return None


def _storage_uses(block, torch_in: bool) -> tuple[int, int] | None:
    """A torch block's (storage handle, uses of its storage now: the block and its results), for
    ``_unused``; None for a CuPy block."""
    if not torch_in:
        return None
    torch = sys.modules["torch"]
    handle = block.untyped_storage()._cdata
    return handle, torch._C._storage_Use_Count(handle)


def _torch_layout(binding: Binding) -> list:
    """``binding.result_layout`` for a torch block of the element type: (name, offset in elements
    or None for a given output, shape, contiguous strides), made once per binding."""
    got = binding.torch_layout
    if got is None:
        got = []
        for name, off, shape, _ in binding.result_layout:
            strides, step = [], 1
            for n in reversed(shape):
                strides.append(step)
                step *= n
            got.append((name, None if off is None else off // binding.dtype.itemsize, tuple(shape),
                        tuple(reversed(strides))))
        binding.torch_layout = got
    return got


class BoundCall:
    """A program bound to its arguments once: outputs allocated once and reused by every call,
    which only launches (replayed from a CUDA graph from the second call on, when it makes
    several launches).  For repeated runs on the same arrays and for timing."""

    def __init__(self, ex: Executor, inputs: dict, out: dict | None = None):
        out = dict(out or {})
        cp = cupy()
        key, _, _, _ = ex._read(inputs, out, cp)
        binding, arrays, scalars, torch_in = ex._bind(inputs, out, key)
        self.binding, self.executor = binding, ex
        self.dims = binding.dims
        out_list = [adapt(out[n], f"out[{n!r}]") for n in binding.out_names]
        self._in = arrays
        if binding.csr:
            binding.check_csr(inputs, self._in)
        self._out = [facts(a)[4] for a in out_list]
        if out_list:
            ex._check_overlap(binding, self._in, self._out)
        self._own, self._block = ex._allocate(binding, torch_in, cp)
        self._scalars = scalars
        self._torch = torch_in
        self.result = ex._result(binding, self._block, out)
        self._arrays = [inputs, out_list]       # kept alive with the binding

    @property
    def outputs(self):
        """The program's outputs a call writes (``result``)."""
        return self.result

    @property
    def launches(self) -> list:
        """The launches of one call (fills, the pre-passes of csr matrices with long rows, kernels),
        each with ``name`` and ``dependent``."""
        return [launch for launch, _ in self.binding.launches]

    @property
    def launch_count(self) -> int:
        return self.binding.launch_count

    def __call__(self, sync: bool = False, stream=None):
        ex, b = self.executor, self.binding
        cp = cupy()
        s = ex.stream_of(stream, b.device, self._torch)
        tmp = ex._temporaries(b, s, cp) if b.tmp_bytes else 0
        ex._launch(b, s, self._in, self._out, self._own, tmp, self._scalars)
        if sync:
            driver.synchronize(s)
        return self.result


def reserved_inputs(program) -> list:
    """Script inputs whose names clash with the call's keywords."""
    return [v for v in program.inputs if v.name in RESERVED]


__all__ = ["BoundCall", "Executor", "OUT", "reserved_inputs"]
