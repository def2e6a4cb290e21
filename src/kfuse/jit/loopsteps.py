"""Several steps of a loop body as one program: ``fori_loop(..., unroll=U)`` and ``explain_loop``.

A step's last calls and the next step's first ones are in different programs when the body is
traced once, so the planner never weighs fusing them (CG's update of p and the next ``A @ p``
both touch p).  Traced U times in a row, the steps are one program: the planner sees step k's
tail beside step k+1's head and fuses them wherever its rules allow, as it would any two calls
of a script.  ``explain_loop`` shows what it makes of that -- each value passed from one step to
the next, fused or not, with the rule that keeps them apart -- and the two plans' prices as
device-loop steps (``cost/queued.py``; ``loopexplain.py``).

For the dense solvers of ``examples/solvers`` nothing fuses across the boundary: the step ends
with a vector update that the next step's gemv reads along its columns, so every block of the
gemv needs entries that other blocks make (a global barrier), and least squares' gradient is a
gemtv's reduction, complete only after it.  A body of vector updates only (a momentum or
relaxation step) does fuse across it.  ``fori_loop``'s ``unroll`` is therefore the caller's to
ask for (default 1), like JAX's."""
from __future__ import annotations

import numpy as np

from .decorator import JitFunction
from ..errors import KfuseError


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


__all__ = ["unrolled", "check_unroll"]
