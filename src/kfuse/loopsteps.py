"""Several steps of a loop body as one program: ``fori_loop(..., unroll=U)`` and ``explain_loop``.

A step's last calls and the next step's first ones are in different programs when the body is
traced once, so the planner never weighs fusing them (CG's update of p and the next ``A @ p``
both touch p).  Traced U times in a row, the steps are one program: the planner sees step k's
tail beside step k+1's head and fuses them wherever its rules allow, as it would any two calls
of a script.  ``explain_loop`` shows what it makes of that -- each value passed from one step to
the next, fused or not, with the rule that keeps them apart -- and the two plans' prices as
device-loop steps (``cost/queued.py``).

For the dense solvers of ``examples/solvers`` nothing fuses across the boundary: the step ends
with a vector update that the next step's gemv reads along its columns, so every block of the
gemv needs entries that other blocks make (a global barrier), and least squares' gradient is a
gemtv's reduction, complete only after it.  A body of vector updates only (a momentum or
relaxation step) does fuse across it.  ``fori_loop``'s ``unroll`` is therefore the caller's to
ask for (default 1), like JAX's."""
from __future__ import annotations

import numpy as np

from .decorator import JitFunction
from .errors import KfuseError


def unrolled(body_fun, unroll: int, lower: int):
    """``body_fun`` applied ``unroll`` times as one ``fori_loop`` body: iteration j runs steps
    ``lower + unroll j + u`` for u in 0..unroll-1 (the index passed to ``body_fun`` is theirs).
    A jitted body's library and options stay with it."""
    def steps(j, state):
        for u in range(unroll):
            state = body_fun(unroll * j + (lower + u) if lower + u else unroll * j, state)
        return state
    name = getattr(body_fun, "__name__", "")
    steps.__name__ = f"{name if name.isidentifier() else 'body'}_x{unroll}"
    steps.__wrapped__ = body_fun.fn if isinstance(body_fun, JitFunction) else body_fun   # type: ignore[attr-defined]
    if isinstance(body_fun, JitFunction):
        fuse, tuned, calibration, strips = body_fun._options
        return JitFunction(steps, library=body_fun._folders or None, fuse=fuse, tuned=tuned,
                           calibration=calibration, vector_on_strips=strips)
    return steps


def check_unroll(unroll) -> int:
    """``unroll`` as an int, or a ``KfuseError`` for anything but an int of at least 1."""
    if isinstance(unroll, bool) or not isinstance(unroll, (int, np.integer)) or unroll < 1:
        raise KfuseError(f"fori_loop: unroll must be an int of at least 1, got {unroll!r}")
    return int(unroll)


def _planned(body, leaves: list):
    """A traced body's program as a loop instance runs it at the state's sizes (device scalars
    read by address)."""
    from .loops import _specs
    from .runtime.binding import bind_sizes
    specs, _ = _specs(leaves, "explain_loop")
    shapes, scalars = {}, set()
    for name, src in body.inputs.items():
        spec = specs[src[1]] if src[0] == "leaf" else None
        if spec is None or spec.kind == "dscalar":
            scalars.add(name)
        elif spec.kind == "csr":
            shapes[name] = spec.shape[:2]
        else:           # a 3-D state entry is a vector laid out as a grid (loops._Body)
            shapes[name] = (spec.shape[0] * spec.shape[1] * spec.shape[2],) if len(spec.shape) == 3 else spec.shape
    prog = body.compiled.program
    return body.compiled.resolve(frozenset(scalars), bind_sizes(prog, shapes))


def explain_loop(body_fun, init_val, unroll: int = 2) -> str:
    """What the planner makes of ``unroll`` steps of a ``fori_loop`` body traced as one program,
    for the state ``init_val`` (NumPy arrays will do: only shapes and dtypes are read): each
    value one step passes to the next, fused into one kernel with the call that reads it or
    not (the rule's reason), and both plans priced as device-loop steps."""
    from .cost.queued import step_price
    from .fusion import why_not
    from .fusion.reasons import NestingDiffers
    from .ir.graph import DependencyGraph
    from .loops import _body
    if check_unroll(unroll) < 2:
        raise KfuseError("explain_loop: unroll must be at least 2 (the steps shown together)")
    one, leaves = _body(body_fun, True, init_val, "explain_loop")
    many, _ = _body(unrolled(body_fun, unroll, 0), True, init_val, "explain_loop")
    c1, cu = _planned(one, leaves), _planned(many, leaves)
    p1, pu = (step_price(c.search.model, c.kernels, c.search.dims, c.search.entries, c.search.itemsize)
              for c in (c1, cu))
    lines = [f"one step: {len(c1.kernels)} kernel(s), priced {p1.seconds * 1e6:.1f} us as a device-loop step "
             "(cost/queued.py)",
             f"{unroll} steps as one program: {len(cu.kernels)} kernel(s), priced {pu.seconds * 1e6:.1f} us "
             f"({pu.seconds / unroll * 1e6:.1f} a step, {pu.seconds / unroll / p1.seconds:.2f}x one step's)"]
    prog, n = cu.program, len(c1.program.calls)
    if len(prog.calls) != unroll * n:
        lines.append(f"across the step boundary: not listed ({len(prog.calls)} calls in {unroll} steps, not "
                     f"{unroll} x {n})")
    else:
        graph = DependencyGraph(prog)
        kernel_of = {kc.call.index: k for k, code in enumerate(cu.kernels) for kc in code.spec.calls}
        lines.append("across the step boundary (step 1 -> step 2):")
        for a in range(n):
            for b in sorted(graph.succs[a]):
                if not n <= b < 2 * n:
                    continue
                head = f"  c{a} {prog.calls[a].text()} -> c{b} {prog.calls[b].text()}: "
                if kernel_of.get(a) == kernel_of.get(b):
                    lines.append(head + f"fused (kernel {kernel_of[a]})")
                else:
                    reason = why_not(prog, graph, frozenset({a, b}))
                    strips = why_not(prog, graph, frozenset({a, b}), True) if isinstance(getattr(reason, "reason", None), NestingDiffers) else None
                    lines.append(head + (f"not fused: {reason}" if reason is not None
                                         else "legal, not chosen (the plan priced better without it)")
                                 + (f"; with vector_on_strips: {strips}" if strips is not None else ""))
    return "\n".join(lines) + f"\n\n{many.lowered.script}\n{cu.describe()}"


__all__ = ["explain_loop", "unrolled", "check_unroll"]
