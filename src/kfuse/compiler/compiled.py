"""A compiled script: an immutable value -- its program, plan, generated kernels and the artifact
the runtime runs -- and the entry points that run it (``prog(**inputs)``, ``bind``, ``tune``).

What the runtime runs is its ``artifact`` (``ir/artifact.Artifact``: the program, the kernels,
the module's text, rendered on first use by the pipeline's emit stage); the runtime's executor is
handed one callable, ``calls.resolve_artifact(sizes, device_scalars)``, and keeps its own tables per
artifact (launch shapes, block orders, GPU modules: ``runtime/order.py``, ``runtime/modules.py``).
The programs planned for other size classes and device scalars are its compiler session's
(``session.py``), which made it; ``share_source`` and ``with_plan`` return new compiled scripts.
The one state beside the value is its call path (``calls``, ``callpath.py``: the executor's
bindings, graphs and temporaries, the returned arithmetic's kernel), which ``calls.release()``
drops.  What a program moves and computes at given sizes is counted by ``cost/counts.py``."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from .callpath import CallPath
from . import torchop
from .pipeline import describe_plan, make_artifact
from ..codegen.kernel import KernelCode
from ..errors import KfuseError
from ..fusion.plans import PlanSearch
from ..ir.artifact import Artifact
from ..ir.graph import DependencyGraph
from ..ir.plan import Plan
from ..ir.program import Program, ScalarArg
from ..library.schema import Library
from ..progress import PassTimes

class Session(Protocol):
    """What a compiled script asks the compiler session that made it (``session.CompilerSession``)."""

    def for_sizes(self, compiled: "CompiledScript", dims: Mapping[int, int]) -> "CompiledScript": ...

    def for_device_scalars(self, compiled: "CompiledScript", names) -> "CompiledScript": ...

    def with_plan(self, compiled: "CompiledScript", plan: Plan) -> "CompiledScript": ...


@dataclass(frozen=True)
class CompiledScript:
    """A script compiled for one element type: its program, plan and CUDA source.

    The facade a user holds (docs/python-api.md): calling it (``__call__``, ``bind``, ``tune``),
    reading it (``cuda_source``, ``describe``, ``graph``, ``artifact``), and asking its compiler
    session for another plan of it (``with_plan``, ``share_source``, ``for_sizes``,
    ``for_device_scalars``, ``resolve``).  The runtime side is its ``calls`` (``CallPath``)."""
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
    calls: CallPath = field(init=False, repr=False, compare=False)     # the call path (runtime state)

    def __post_init__(self) -> None:
        kernels = tuple(self.kernels)
        object.__setattr__(self, "kernels", kernels)
        object.__setattr__(self, "_artifact", make_artifact(self.program, self.plan, kernels, self.library,
                                                                self.dtype, self._shared))
        object.__setattr__(self, "calls", CallPath(self))

    def _session(self) -> Session:
        if self.session is None:
            raise KfuseError("this compiled script was made outside a compiler session (kfuse.compile, "
                             "session.CompilerSession): it cannot be planned again")
        return self.session

    def with_plan(self, plan: Plan) -> "CompiledScript":
        """The same script compiled with another plan (e.g. the next best, for empirical search).
        The plan is pinned: a call at sizes of another size class runs it too (``for_sizes``).
        A plan of another program is checked against this one as a stored plan is
        (``ir/plan.plan_from_json``): one that does not fit it is a KfuseError (it was compiled
        as given: another script's kernels under this one's name)."""
        if not isinstance(plan, Plan):
            raise KfuseError(f"with_plan takes a plan (kfuse.ir.plan.Plan: a compiled script's .plan, or one of "
                             f".search.plans()), got {type(plan).__name__} {plan!r:.60}")
        if plan.program != self.program:
            from ..ir.plan import plan_from_json, plan_to_json
            theirs, mine = ([c.function.name for c in p.calls] for p in (plan.program, self.program))
            if theirs != mine:
                raise KfuseError(f"with_plan: the plan is one of {plan.program.name} (calls {', '.join(theirs)}), "
                                 f"not of {self.program.name} (calls {', '.join(mine)})")
            try:
                plan = plan_from_json(self.program, plan_to_json(plan))
            except KfuseError as e:
                raise KfuseError(f"with_plan: the plan of {plan.program.name} does not fit {self.program.name}: "
                                 f"{str(e).removeprefix('stored plan ')}") from None
        return self._session().with_plan(self, plan)

    @property
    def cuda_source(self) -> str:
        """The CUDA module: this program's own, or the one it shares (``share_source``)."""
        return self._artifact.source

    def share_source(self, source: str) -> "CompiledScript":
        """This program with its GPU modules built from ``source``, a module that holds its kernels
        among others (tuning/measure.py: one NVRTC compile for many candidate plans): a new
        compiled script, whose artifact shares that module.  A source that is no str, or lacks
        one of this program's kernels, is a KfuseError now (it surfaced as a compile or launch
        error on the GPU, far from the call that made it)."""
        if not isinstance(source, str):
            raise KfuseError(f"share_source takes a CUDA module's text, got {type(source).__name__} {source!r:.60}")
        missing = [k.launch.kernel for k in self.kernels if not re.search(rf"\b{k.launch.kernel}\(", source)]
        if missing:
            raise KfuseError(f"share_source: the module holds no kernel {', '.join(missing)} of {self.program.name}")
        return dataclasses.replace(self, _shared=source)

    @property
    def artifact(self) -> Artifact:
        """What the runtime runs (``ir/artifact.Artifact``): the program, its kernels, the element
        type and the module (the shared one, else its own, rendered on first use); one per
        compiled script."""
        return self._artifact

    @property
    def graph(self) -> DependencyGraph:
        return DependencyGraph(self.program)

    def describe(self) -> str:
        """The plan with each kernel's launch configuration."""
        return describe_plan(self.program, self.plan, self.kernels)

    def resolve(self, device_scalars, dims: dict[int, int]) -> "CompiledScript":
        """The program a call runs: this one with the scalar inputs ``device_scalars`` read by
        address, planned for the size class of ``dims`` (dimension id -> size).  Its artifact is
        the answer to the runtime's one question (``calls.resolve_artifact``)."""
        return self.for_device_scalars(device_scalars).for_sizes(dims)

    def for_sizes(self, dims: dict[int, int]) -> "CompiledScript":
        """The program planned for the size class of ``dims`` (every size rounded to a power of
        two): this one when the class is the one it was planned for (or it was compiled
        unfused, or its plan was given: ``with_plan``), else a plan ranked for that class (a tuned
        winner for it preferred), made once and kept by the compiler session."""
        return self._session().for_sizes(self, dims)

    def for_device_scalars(self, names) -> "CompiledScript":
        """The program with the scalar inputs ``names`` (and no others) bound to 0-d device arrays
        (read by address in the kernels: no round trip through the host), planned like this one
        (a given plan, ``with_plan``, kept); made once per set of names and kept by the compiler
        session."""
        return self._session().for_device_scalars(self, names)

    def __repr__(self) -> str:
        return (f"<kfuse.CompiledScript {self.program.name} ({self.dtype}): {len(self.program.calls)} call(s) in "
                f"{len(self.kernels)} kernel(s)>")

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
        arrays, computed after the plan by one small kernel on the same stream (the binding's last
        launch, in the plan's graph, where ``out`` gives no outputs)."""
        if torchop.compiling():                 # traced by torch.compile: one kfuse::call node
            return self._traced(out, stream, inputs)
        if not self.program.returns:
            return self.calls.executor.call(inputs, out, sync, stream)
        res = self.calls.executor.call(inputs, out, sync, stream)
        return self._returned(res, inputs, stream, sync)

    def _traced(self, out, stream, inputs: dict):
        """A call as torch.compile traces it (``compiler/torchop.py``): the inputs in declaration
        order to ``kfuse::call``; torch places the results and picks the stream."""
        if out is not None or stream is not None:
            raise KfuseError(f"{self.program.name}: out= and stream= are not taken inside torch.compile (torch "
                             "allocates the results and orders the work)")
        names = [v.name for v in self.program.inputs]
        if sorted(inputs) != sorted(names):
            raise KfuseError(f"{self.program.name}: inputs {sorted(inputs)} given, the script takes {names}")
        return torchop.traced_call(self.calls.op_key, self.program.name, [inputs[n] for n in names])

    def _returned(self, res, inputs: dict, stream, sync: bool, results: list | None = None):
        """What the return statement names, from the outputs ``res`` of one run: the arithmetic
        computed into ``results`` (new 0-d arrays when None) by the scalar kernel, launched on
        the stream of that run."""
        from ..runtime import driver
        from ..runtime.args import torch_tensor_type
        outs = res if isinstance(res, tuple) else (res,)
        n = len(self.program.outputs)
        if len(outs) > n:           # the binding launched the arithmetic after the kernels (synced)
            return self._items(outs[:n], iter(outs[n:]))
        like, tensor = outs[0], torch_tensor_type()
        torch_like = tensor is not None and isinstance(like, tensor)
        device = like.device.index if torch_like else like.data.device_id
        s = self.calls.executor.stream_of(stream, device, torch_like)
        tail = self.calls.scalar_tail
        assert tail is not None, "called only for a script that returns arithmetic"
        sources = [outs[k] if where == "out" else inputs[k] for where, k in tail.reads]
        computed = iter(tail.run(like, sources, s, results))
        if sync:
            driver.synchronize(s)
        return self._items(outs, computed)

    def _items(self, outs, computed):
        """What the return statement names: the outputs ``outs`` and the arithmetic's results
        (``computed``, in order)."""
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
        from ..tuning.search import tune
        return tune(self, top=top, sizes=sizes, reps=reps, store=store, log=log, iterations=iterations)

    def bind(self, out: dict | None = None, **inputs):
        """Check and bind arguments once; the returned callable only launches (for repeated runs
        and timing; ``bound(sync=False, stream=None)``).  Its outputs are allocated once and reused
        (the returned arithmetic's too: each call launches its kernel after the plan's)."""
        from ..runtime.executor import BoundCall
        bound = BoundCall(self.calls.executor, inputs, out=out)
        return bound if not self.program.returns else _BoundReturns(self, bound, inputs)


class _BoundReturns:
    """A bound call of a script that returns scalar arithmetic: the plan's launches, then the
    arithmetic's kernel into results made once (``result``: what the return statement names)."""

    def __init__(self, compiled: CompiledScript, bound, inputs: dict):
        self.compiled, self.bound, self.inputs = compiled, bound, inputs
        outs = bound.result if isinstance(bound.result, tuple) else (bound.result,)
        n = len(compiled.program.outputs)
        # the binding launches the arithmetic after the kernels (no outputs given): its results
        # follow the outputs; else the arithmetic's kernel is launched after each call
        self.within = len(outs) > n
        if self.within:
            self._outputs, self._results = outs[:n], list(outs[n:])
        else:
            tail = compiled.calls.scalar_tail
            assert tail is not None, "made only for a script that returns arithmetic"
            self._outputs, self._results = outs, tail.empty(outs[0])
        self.result = compiled._items(self._outputs, iter(self._results))

    @property
    def outputs(self):
        """The program's outputs a call writes (before the arithmetic)."""
        return self._outputs[0] if len(self._outputs) == 1 else self._outputs

    def __getattr__(self, name: str):
        return getattr(self.bound, name)        # binding, dims, launches, launch_count

    def __call__(self, sync: bool = False, stream=None):
        if self.within:
            self.bound(sync=sync, stream=stream)
            return self.result
        self.bound(sync=False, stream=stream)
        self.compiled._returned(self.bound.result, self.inputs, stream, sync, self._results)
        return self.result
