"""A compiled script: an immutable value -- its program, plan, generated kernels and the artifact
the runtime runs -- and the entry points that run it (``prog(**inputs)``, ``bind``, ``tune``).

What the runtime runs is its ``artifact`` (``ir/artifact.Artifact``: the program, the kernels,
the module's text, rendered on first use by the pipeline's emit stage); the runtime's executor is
handed one callable, ``resolve_artifact(sizes, device_scalars)``, and keeps its own tables per
artifact (launch shapes, block orders, GPU modules: ``runtime/order.py``, ``runtime/modules.py``).
The programs planned for other size classes and device scalars are its compiler session's
(``session.py``), which made it; ``share_source`` and ``with_plan`` return new compiled scripts.
The one state beside the value is its call path (``executor``: bindings, graphs, temporaries),
which ``release`` drops."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import numpy as np

from .pipeline import describe_plan, load, make_artifact, uncovered_at
from .codegen.kernel import KernelCode
from .errors import KfuseError
from .fusion.plans import PlanSearch
from .ir.artifact import Artifact
from .ir.graph import DependencyGraph
from .ir.plan import Plan
from .ir.program import Program, ScalarArg
from .library import expr as library_expr
from .library.schema import Library
from .passes import PassTimes

if TYPE_CHECKING:
    from .runtime.control import ScalarTail
    from .runtime.executor import Executor


class Session(Protocol):
    """What a compiled script asks the compiler session that made it (``session.CompilerSession``)."""

    def for_sizes(self, compiled: "CompiledScript", dims: Mapping[int, int]) -> "CompiledScript": ...

    def for_device_scalars(self, compiled: "CompiledScript", names) -> "CompiledScript": ...

    def with_plan(self, compiled: "CompiledScript", plan: Plan) -> "CompiledScript": ...


class _CallPath:
    """The call path of one compiled script (runtime state, not part of the value): its executor
    and the returned arithmetic's kernel, made on first use."""
    __slots__ = ("executor", "tail")

    def __init__(self) -> None:
        self.executor: "Executor | None" = None
        self.tail: "ScalarTail | None" = None


@dataclass(frozen=True)
class CompiledScript:
    """A script compiled for one element type: its program, plan and CUDA source.

    More public methods than one job would need, for a reason: this is the object a user holds,
    and its methods are the documented API (docs/python-api.md) in four groups, each thin over
    the module that does the work -- calls (``__call__``, ``bind``, ``call_outputs``, ``tune``,
    ``with_plan``, ``release``), views (``cuda_source``, ``own_source``, ``describe``, ``graph``,
    ``scalars_source``, ``persistent_source``), metrics the benchmarks read (``entries``,
    ``traffic``, ``compulsory_traffic``, ``flops``, ``uncovered``), and the seams to the compiler
    session and the runtime (``artifact``, ``resolve_artifact``, ``resolve``, ``for_sizes``,
    ``for_device_scalars``, ``share_source``, ``executor``, ``scalar_tail``, ``module``,
    ``functions``, ``fill_function``)."""
    program: Program
    library: Library
    dtype: str
    plan: Plan
    kernels: tuple[KernelCode, ...] = field(repr=False)
    search: PlanSearch | None = field(default=None, repr=False)   # the ranked plan space (fused compiles)
    timings: PassTimes = field(default_factory=PassTimes, repr=False, compare=False)   # the pipeline's stages
    tuned: object = field(default=True, repr=False, compare=False)     # the tuning store compile() used
    from_store: bool = field(default=False, repr=False, compare=False)  # the plan is a tuned winner
    pinned: bool = field(default=False, repr=False, compare=False)      # the plan was given (with_plan): kept at every size
    tuning: dict | None = field(default=None, repr=False, compare=False)   # what tune() measured and stored
    session: Session | None = field(default=None, repr=False, compare=False)   # the compiler session that made it
    _shared: str | None = field(default=None, repr=False, compare=False)    # a module shared with other programs
    _artifact: Artifact = field(init=False, repr=False, compare=False)
    _calls: _CallPath = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kernels = tuple(self.kernels)
        object.__setattr__(self, "kernels", kernels)
        object.__setattr__(self, "_artifact", make_artifact(self.program, self.plan, kernels, self.library,
                                                                self.dtype, self.timings, self._shared))
        object.__setattr__(self, "_calls", _CallPath())

    def _session(self) -> Session:
        if self.session is None:
            raise KfuseError("this compiled script was made outside a compiler session (kfuse.compile, "
                             "session.CompilerSession): it cannot be planned again")
        return self.session

    def with_plan(self, plan: Plan) -> "CompiledScript":
        """The same script compiled with another plan (e.g. the next best, for empirical search).
        The plan is pinned: a call at sizes of another size class runs it too (``for_sizes``)."""
        return self._session().with_plan(self, plan)

    @property
    def cuda_source(self) -> str:
        """The CUDA module: this program's own, or the one it shares (``share_source``)."""
        return self._artifact.source

    @property
    def own_source(self) -> str:
        """The CUDA module of this program's kernels alone."""
        return self._artifact.own_source

    def persistent_source(self, kernel: str) -> str:
        """The module of a persistent kernel (``kernel``'s text, made by
        ``codegen/loop/``) that runs this program's kernels as device functions, one after
        the other in one launch (a device loop's steps)."""
        return self._artifact.persistent_source(kernel)

    def share_source(self, source: str) -> "CompiledScript":
        """This program with its GPU modules built from ``source``, a module that holds its kernels
        among others (tuning/measure.py: one NVRTC compile for many candidate plans): a new
        compiled script, whose artifact shares that module."""
        return dataclasses.replace(self, _shared=source)

    @property
    def artifact(self) -> Artifact:
        """What the runtime runs (``ir/artifact.Artifact``): the program, its kernels, the element
        type and the module (the shared one, else its own, rendered on first use); one per
        compiled script."""
        return self._artifact

    def resolve_artifact(self, sizes: Mapping[int, int], device_scalars: frozenset[str]) -> Artifact:
        """The artifact a call at ``sizes`` (dimension id -> size) runs, with the scalar inputs
        ``device_scalars`` read by address (``resolve``): the one callable the runtime's executor is
        handed (``ir/artifact.Resolve``)."""
        return self.resolve(device_scalars, dict(sizes)).artifact

    @property
    def graph(self) -> DependencyGraph:
        return DependencyGraph(self.program)

    def describe(self) -> str:
        """The plan with each kernel's launch configuration."""
        return describe_plan(self.program, self.plan, self.kernels)

    @property
    def scalar_tail(self) -> "ScalarTail | None":
        """The returned scalar arithmetic as one small kernel (``runtime/control.ScalarTail``, its
        text ``codegen/loop/scalars.ScalarCode``'s), or None when the script returns none."""
        if self._calls.tail is None and self.program.returned_arithmetic():
            from .codegen.loop.scalars import ScalarCode
            from .runtime.control import ScalarTail
            self._calls.tail = ScalarTail(ScalarCode.script(self.program, self.dtype))
        return self._calls.tail

    @property
    def scalars_source(self) -> str | None:
        """The CUDA module of the returned scalar arithmetic (``kf_scalars``, every operand read
        by address; a scalar input passed as a number is passed by value instead), or None."""
        tail = self.scalar_tail
        return None if tail is None else tail.source()

    def module(self, device: int, orders: tuple[int, ...] = ()):
        """The compiled module on a device, built for the kernels' orders (runtime/order.py; none
        given: order 0 throughout), compiled once per choice and kept by the runtime
        (``runtime/modules.py``, per artifact): the pipeline's load stage."""
        return load(self._artifact, device, orders)

    def functions(self, device: int, orders: tuple[int, ...] = ()) -> list:
        """The compiled kernels on a device, in launch order."""
        from .runtime import modules
        return modules.functions(self._artifact, device, orders)

    def fill_function(self, device: int, orders: tuple[int, ...] = ()):
        """The module's kf_fill kernel (clears reduced outputs before a kernel)."""
        from .runtime import modules
        return modules.fill_function(self._artifact, device, orders)

    def entries(self, dims: dict[int, int]) -> dict[int, int]:
        """Value id -> number of entries, for dimension sizes ``dims`` (dimension id -> size)."""
        out = {}
        for v in self.program.values:
            n = 1
            for d in v.dims:
                n *= dims[d]
            out[v.id] = n
        return out

    def traffic(self, dims: dict[int, int]) -> int:
        """Bytes the plan moves through global memory: per kernel, each array it loads or stores
        once (re-reads of small invariant subvectors by several blocks are not counted)."""
        n = self.entries(dims)
        size = np.dtype(self.dtype).itemsize
        total = 0
        for k in self.kernels:
            moved = {a.value.id for a in k.launch.args if a.kind == "array" and a.value is not None}
            total += sum(n[v] for v in moved) * size
        return total

    def compulsory_traffic(self, dims: dict[int, int]) -> int:
        """Bytes if every input were read once and every output written once."""
        n = self.entries(dims)
        size = np.dtype(self.dtype).itemsize
        vals = [v for v in self.program.inputs if v.type != "scalar"] + list(self.program.outputs)
        return sum(n[v.id] for v in vals) * size

    def flops(self, dims: dict[int, int]) -> int:
        """Floating-point operations of the script, from the library's per-function counts."""
        n = self.entries(dims)
        total = 0
        for c in self.program.calls:
            if c.function.flops is None:
                raise KfuseError(f"{c.function.name} ({c.function.file}) declares no flops count")
            scope = {p: (n[v.id] if hasattr(v, "id") else 1) for p, v in c.bindings().items()}
            total += int(library_expr.evaluate(c.function.flops, scope, "flops"))   # checked, never eval
        return total

    def resolve(self, device_scalars, dims: dict[int, int]) -> "CompiledScript":
        """The program a call runs: this one with the scalar inputs ``device_scalars`` read by
        address, planned for the size class of ``dims`` (dimension id -> size).  Its artifact is
        the answer to the runtime's one question (``resolve_artifact``)."""
        return self.for_device_scalars(device_scalars).for_sizes(dims)

    def for_sizes(self, dims: dict[int, int]) -> "CompiledScript":
        """The program planned for the size class of ``dims`` (every size rounded to a power of
        two): this one when the class is the one it was planned for (or it was compiled
        unfused, or its plan was given: ``with_plan``), else a plan ranked for that class (a tuned
        winner for it preferred), made once and kept by the compiler session."""
        return self._session().for_sizes(self, dims)

    def uncovered(self, dims: Mapping[int, int]) -> str | None:
        """Why a kernel of this plan whose tiles span an axis whole (strips of whole rows: a
        reduction's result used in its kernel) cannot run at sizes ``dims`` -- the axis is
        longer than its strip -- or None when every kernel can."""
        return uncovered_at(self.kernels, dims)

    def for_device_scalars(self, names) -> "CompiledScript":
        """The program with the scalar inputs ``names`` (and no others) bound to 0-d device arrays
        (read by address in the kernels: no round trip through the host), planned like this one
        (a given plan, ``with_plan``, kept); made once per set of names and kept by the compiler
        session."""
        return self._session().for_device_scalars(self, names)

    def __repr__(self) -> str:
        return (f"<kfuse.CompiledScript {self.program.name} ({self.dtype}): {len(self.program.calls)} call(s) in "
                f"{len(self.kernels)} kernel(s)>")

    @property
    def executor(self) -> "Executor":
        """The call path (runtime/executor.py): bindings per argument signature, graphs."""
        calls = self._calls
        if calls.executor is None:
            from .runtime.executor import Executor
            calls.executor = Executor(self.program, self.dtype, self.resolve_artifact)
        return calls.executor

    def release(self) -> None:
        """Drop the call path's device memory (temporaries, graphs, bindings); the next call builds
        it again.  The empirical search releases each candidate once timed: 20 candidates of a
        large script would otherwise hold 20 sets of temporaries."""
        self._calls.executor = None

    def __call__(self, out: dict | None = None, sync: bool = False, stream=None, **inputs):
        """Run on the GPU.  Inputs by script name (CuPy arrays, torch CUDA tensors, any CUDA array
        with ``__cuda_array_interface__`` or ``__dlpack__``; numbers for scalars); returns the
        results in the order of the script's return statement (a single array when it returns one
        value), as CuPy arrays -- or torch tensors when the inputs are torch tensors.  Launches go
        to the caller's current stream (torch's with torch tensors, else CuPy's) or ``stream``
        (a CuPy or torch stream or a raw handle).  ``out`` maps returned names to preallocated
        arrays; ``sync=True`` waits for the kernels and reports any execution error.  A repeated
        call with the same argument signature skips every check but the cheap ones.  Scalar
        arithmetic in the return statement (``return sqrt(rr), rr / bb;``) comes back as 0-d
        arrays, computed after the plan by one small kernel on the same stream."""
        if not self.program.returns:
            return self.executor.call(inputs, out, sync, stream)
        res = self.executor.call(inputs, out, False, stream)
        return self._returned(res, inputs, stream, sync)

    def call_outputs(self, out: dict | None = None, sync: bool = False, stream=None, **inputs):
        """Run like a call, returning the program's outputs (``program.outputs``, in order; a single
        array for one) without the returned arithmetic: the values the kernels compute, for
        checks against the reference.  The same as a call for a script that returns no
        arithmetic."""
        return self.executor.call(inputs, out, sync, stream)

    def _returned(self, res, inputs: dict, stream, sync: bool, results: list | None = None):
        """What the return statement names, from the outputs ``res`` of one run: the arithmetic
        computed into ``results`` (new 0-d arrays when None) by the scalar kernel, launched on
        the stream of that run."""
        from .runtime import driver
        from .runtime.args import torch_tensor_type
        from .runtime.gpu import cupy
        outs = res if isinstance(res, tuple) else (res,)
        like, tensor = outs[0], torch_tensor_type()
        torch_like = tensor is not None and isinstance(like, tensor)
        device = like.device.index if torch_like else like.data.device_id
        s = self.executor._stream(stream, device, torch_like, cupy())
        tail = self.scalar_tail
        assert tail is not None, "called only for a script that returns arithmetic"
        sources = [outs[k] if where == "out" else inputs[k] for where, k in tail.reads]
        computed = iter(tail.run(like, sources, s, results))
        if sync:
            driver.synchronize(s)
        items = [outs[self.program.outputs.index(r)] if not isinstance(r, ScalarArg) else next(computed)
                 for r in self.program.returns]
        return items[0] if len(items) == 1 else tuple(items)

    def tune(self, top: int = 20, sizes: dict[str, int] | None = None, reps: int = 30, store=True,
             log=None, iterations: bool = True) -> "CompiledScript":
        """Empirical search: compile the ``top`` plans ranked first by the model (one NVRTC
        compile for all of them), check each against the float64 reference on random inputs of
        ``sizes`` (script size name -> value; default the model's), time each with CUDA events,
        and return the program with the fastest; then (``iterations``) try explicit serial-iteration
        counts for each of its kernels against the launch-time choice.  The winner is remembered in the tuning store
        (``store=False``: not; a path or TuningStore: that one), and later compiles for the same
        GPU, script, library, dtype and size class use it at once."""
        from .tuning.search import tune
        return tune(self, top=top, sizes=sizes, reps=reps, store=store, log=log, iterations=iterations)

    def bind(self, out: dict | None = None, **inputs):
        """Check and bind arguments once; the returned callable only launches (for repeated runs
        and timing; ``bound(sync=False, stream=None)``).  Its outputs are allocated once and reused
        (the returned arithmetic's too: each call launches its kernel after the plan's)."""
        from .runtime.executor import BoundCall
        bound = BoundCall(self.executor, inputs, out=out)
        return bound if not self.program.returns else _BoundReturns(self, bound, inputs)


class _BoundReturns:
    """A bound call of a script that returns scalar arithmetic: the plan's launches, then the
    arithmetic's kernel into results made once (``result``: what the return statement names)."""

    def __init__(self, compiled: CompiledScript, bound, inputs: dict):
        self.compiled, self.bound, self.inputs = compiled, bound, inputs
        outs = bound.result if isinstance(bound.result, tuple) else (bound.result,)
        tail = compiled.scalar_tail
        assert tail is not None, "made only for a script that returns arithmetic"
        self._results = tail.empty(outs[0])
        self.result = self._package(outs)

    def _package(self, outs) -> Any:
        computed = iter(self._results)
        items = [outs[self.compiled.program.outputs.index(r)] if not isinstance(r, ScalarArg) else next(computed)
                 for r in self.compiled.program.returns]
        return items[0] if len(items) == 1 else tuple(items)

    @property
    def outputs(self):
        """The program's outputs a call writes (before the arithmetic)."""
        return self.bound.result

    def __getattr__(self, name: str):
        return getattr(self.bound, name)        # binding, dims, launches, launch_count

    def __call__(self, sync: bool = False, stream=None):
        self.bound(sync=False, stream=stream)
        self.compiled._returned(self.bound.result, self.inputs, stream, sync, self._results)
        return self.result
