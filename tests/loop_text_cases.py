"""The device loop's generated texts for fixed arguments, independent of the planner: the loop
control module (``control_source``), the C expression writer (``c_expr``), the persistent and
merged kernels and the head wrapper for synthetic step kernels, and the returned arithmetic's
``kf_scalars`` module.  ``cases(api)`` makes them all through ``api`` (a namespace of the
functions that write them), so the same cases run against any layout of the code that writes
them: tests/test_loop_texts.py checks them against digests recorded before the text writers
moved out of the runtime (issue 59, commit 7e4f7b9)."""
from __future__ import annotations

import ctypes
import hashlib
from itertools import product

LEAF0, LEAF1, LEAF2 = ("leaf", 0), ("leaf", 1), ("leaf", 2)
HALF = ("*", LEAF0, LEAF1)                           # an operation two expressions share
TAILS = {
    "none": (),
    "one": (("+", LEAF0, ("num", 1.0)),),
    "shared": (("+", HALF, HALF), ("sqrt", HALF), ("/", ("abs", LEAF2), ("neg", ("num", 0.5)))),
}
_SQ = ("*", LEAF1, LEAF1)
PREDS = {
    "none": None,
    "plain": (">", ("leaf", 5), ("*", ("const", 0), LEAF1)),
    "shared": ("and", (">", _SQ, ("const", 0)), ("not", ("or", (">", _SQ, ("const", 1)), ("==", LEAF0, ("num", 0.0))))),
}


def _real(dtype: str):
    return ctypes.c_double if dtype == "float64" else ctypes.c_float


def _kernels(api, dtype: str) -> tuple:
    """Three step kernels: a wide one of many blocks with shared memory, two narrow vector kernels
    (arguments: pointers, sizes, a number, the serial iterations, the flip)."""
    real = _real(dtype)
    p, n, i = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int
    return (api.Kernel("kf_gemv", 256, 40, (p, p, p, n, n, i, i)),
            api.Kernel("kf_dot", 64, 0, (p, p, p, n, real, i, i)),
            api.Kernel("kf_axpy", 128, 0, (p, p, n, real, p, i, i)))


def _sizes(kern, n: int) -> tuple:
    return tuple((k, n if t is ctypes.c_longlong else 3) for k, t in enumerate(kern.args[:-1])
                 if t in (ctypes.c_longlong, ctypes.c_int))


def cases(api) -> dict[str, str]:
    """Every text, by case name."""
    out: dict[str, str] = {}
    for dtype in ("float32", "float64"):
        for (tn, tails), (pn, pred), cond, clears, saved, carried in product(
                TAILS.items(), PREDS.items(), (True, False), (0, 2), (0, 3), (0, 3)):
            if pred is None and (saved or not cond):
                continue            # saves and the plain variant belong to a while loop
            key = f"control/{dtype}/{tn}/{pn}/{'cond' if cond else 'plain'}/c{clears}/s{saved}/k{carried}"
            out[key] = api.control_source(dtype, tails, pred, cond, clears=clears, saved=saved, carried=carried)
        ks = _kernels(api, dtype)
        m = len(ks)
        shapes = {
            "bare": api.PShape(ks, (), 0, (), 0, False, False, None, 0),
            "every": api.PShape(ks, ((m - 1, True), (0, False), (m + 1, True)), 1, TAILS["shared"], 3, True, True,
                                PREDS["plain"], 6),
            "early-counter": api.PShape(ks[1:], ((0, False),), 2, TAILS["one"], 1, True, False, PREDS["shared"], 2),
            "one-kernel": api.PShape(ks[:1], ((2, True),), 0, (), 0, True, True, None, 0),
        }
        for name, shape in shapes.items():
            out[f"persistent/{dtype}/{name}"] = api.persistent_text(shape, dtype)
        small = ks[1:]
        merged = {
            "plain": api.MShape(small, (1, 1)),
            "work": api.MShape(small, (1, 2), clears=2, copies=1, tails=TAILS["shared"], tail_reads=3, indexed=True,
                               groups=(2, 1), block=128, sizes=tuple(_sizes(k, 1000) for k in small)),
            "step-end": api.MShape(small, (1, 1), clears=1, pred=PREDS["plain"], pred_reads=6, consts=True, saved=2),
            "step-end-bare": api.MShape(small, (1, 1), pred=PREDS["shared"], pred_reads=2, consts=True),
            "wide": api.MShape(ks, (3, 1, 1), copies=2, allow=True, block=512),
        }
        for name, shape in merged.items():
            out[f"merged/{dtype}/{name}"] = api.merged_text(shape, dtype, f"kf_merged_{name.replace('-', '_')}")
        out[f"head/{dtype}"] = api.head_text(ks[0], _sizes(ks[0], 4096), "kf_head")
        exprs = list(TAILS["shared"]) + [("-", ("value", 3), LEAF0)]
        for numbers in ((), (False, True, False, False), (True, True, True, True)):
            key = f"scalars/{dtype}/{''.join('n' if x else 'a' for x in numbers) or 'addresses'}"
            out[key] = api.scalar_source(dtype, exprs, [("out", 0), ("out", 1), ("in", "x"), ("in", "y")], numbers)
    for name, pred in PREDS.items():
        if pred is not None:
            out[f"c_expr/{name}"] = api.c_expr(pred)
    return out


def digests(texts: dict[str, str]) -> dict[str, str]:
    return {k: hashlib.sha256(v.encode()).hexdigest() for k, v in texts.items()}
