"""The expression fields of a function table (``reference``, ``flops``), checked by :mod:`.expr`
at load (never run as Python)."""
from __future__ import annotations

from .expr import ExprError, check
from .schema import GRID_RANKS, Param


def _expression(ctx, t: dict, where: str, key: str, names: set[str], syntax: str, what: str,
                grid: bool = False) -> str | None:
    """An optional expression field, checked by :mod:`.expr` (never run as Python): only the constructs
    the library format documents (``grid``: a stencil's reference, with cross and box), names among ``names``."""
    expr = ctx.get(t, key, where, str, None)
    if expr is not None:
        try:
            check(expr, frozenset(names), "grid_reference" if grid and key == "reference" else key)
        except ExprError as e:
            msg = str(e)
            if msg.startswith("syntax: "):
                msg = f"{syntax}: {msg[8:]}"
            raise ctx.fail(f"{where}.{key}", f"{msg} (in {expr[:80]!r})") from None
    return expr


def reference_field(ctx, t: dict, where: str, params: tuple[Param, ...]) -> str | None:
    """A NumPy expression of the inputs giving the output (a tuple for several outputs)."""
    names = {p.name for p in params if p.dir == "in"}
    return _expression(ctx, t, where, "reference", names, "not a Python expression", "an input parameter",
                       grid=t.get("grid", 0) in GRID_RANKS)


def flops_field(ctx, t: dict, where: str, params: tuple[Param, ...]) -> str | None:
    """Floating-point operations as an expression of the parameters' entry counts."""
    return _expression(ctx, t, where, "flops", {p.name for p in params}, "not an expression", "a parameter")
