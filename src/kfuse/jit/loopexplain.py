"""``kfuse.explain_loop``: what the planner makes of several steps of a ``fori_loop`` body traced as
one program (``loopsteps.py``) -- each value one step passes to the next, fused or not with the
rule's reason -- and both plans priced as device-loop steps (``cost/queued.py``)."""
from __future__ import annotations

from ..errors import KfuseError
from .loops import traced_body, state_specs, traced_shape
from .loopsteps import check_unroll, unrolled


def _planned(body, leaves: list):
    """A traced body's program as a loop instance runs it at the state's sizes (device scalars
    read by address)."""
    from ..runtime.binding import bind_sizes
    specs, _ = state_specs(leaves, "explain_loop")
    shapes, scalars = {}, set()
    for name, src in body.inputs.items():
        spec = specs[src[1]] if src[0] == "leaf" else None
        if spec is None or spec.kind == "dscalar":
            scalars.add(name)
        else:
            shapes[name] = traced_shape(spec)
    prog = body.compiled.program
    return body.compiled.resolve(frozenset(scalars), bind_sizes(prog, shapes))


def explain_loop(body_fun, init_val, unroll: int = 2) -> str:
    """What the planner makes of ``unroll`` steps of a ``fori_loop`` body traced as one program,
    for the state ``init_val`` (NumPy arrays will do: only shapes and dtypes are read): each
    value one step passes to the next, fused into one kernel with the call that reads it or
    not (the rule's reason), and both plans priced as device-loop steps."""
    from ..cost.queued import step_price
    from ..fusion import why_not
    from ..fusion.reasons import NestingDiffers
    from ..ir.graph import DependencyGraph
    if check_unroll(unroll) < 2:
        raise KfuseError("explain_loop: unroll must be at least 2 (the steps shown together)")
    one, leaves = traced_body(body_fun, True, init_val, "explain_loop")
    many, _ = traced_body(unrolled(body_fun, unroll, 0), True, init_val, "explain_loop")
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
                    nesting = isinstance(getattr(reason, "reason", None), NestingDiffers)
                    strips = why_not(prog, graph, frozenset({a, b}), True) if nesting else None
                    lines.append(head + (f"not fused: {reason}" if reason is not None
                                         else "legal, not chosen (the plan priced better without it)")
                                 + (f"; with vector_on_strips: {strips}" if strips is not None else ""))
    return "\n".join(lines) + f"\n\n{many.lowered.script}\n{cu.describe()}"


__all__ = ["explain_loop"]
