"""The peers kfuse is measured against, written by hand per example (keyed by the file stem).

* cuBLAS through CuPy (the paper's baseline): ``cupy.cublas`` gemv, ger, axpy, dot, scal, geam,
  plus the copies an out-of-place result needs.  CuPy's wrappers take row-major (C-contiguous)
  arrays and swap the transposition for cuBLAS's column-major view themselves, so
  ``gemv('N', ...)`` is ``A x`` and ``gemv('T', ...)`` is ``A^T x`` for a row-major ``A``.
  With ``beta = 0`` cuBLAS does not read ``y`` (so NaN-poisoned outputs stay a fair check).
* PyTorch eager: the expression a user would write; torch.compile (default mode) compiles the
  same function.

A cuBLAS builder is ``build(cb, copyto, inputs, outputs) -> run``: ``cb`` is ``cupy.cublas``,
``copyto`` is ``cupy.copyto``, ``inputs`` maps the script's input names to device arrays and
numbers, ``outputs`` maps its returned names to preallocated arrays; ``run()`` computes the
sequence into ``outputs``.  Setup done by the builder itself is not timed.  A torch function
takes the script's inputs by name and returns the results in the order of the script's
``return``.  Neither imports anything: the modules come in as arguments, so the call sequences
are checked on the CPU with NumPy stand-ins (tests/test_bench.py).
"""
from __future__ import annotations

from typing import Any, Callable

Run = Callable[[], None]
CublasBuilder = Callable[[Any, Callable, dict, dict], Run]


# --- cuBLAS through CuPy ------------------------------------------------------------------------

def _axpydot(cb, copyto, i, o) -> Run:
    z, r = o["z"], o["r"]

    def run():
        copyto(z, i["w"])                   # z = w
        cb.axpy(-i["a"], i["v"], z)         # z -= a v
        cb.dot(z, i["u"], out=r)            # r = z . u
    return run


def _atax(cb, copyto, i, o) -> Run:
    A, y = i["A"], o["y"]
    t = y.copy()                                # scratch for A x (setup, not timed)

    def run():
        cb.gemv("N", 1.0, A, i["x"], 0.0, t)    # t = A x
        cb.gemv("T", 1.0, A, t, 0.0, y)         # y = A^T t
    return run


def _bicgk(cb, copyto, i, o) -> Run:
    A = i["A"]

    def run():
        cb.gemv("N", 1.0, A, i["p"], 0.0, o["q"])   # q = A p
        cb.gemv("T", 1.0, A, i["r"], 0.0, o["s"])   # s = A^T r
    return run


def _sgemv(cb, copyto, i, o) -> Run:
    z = o["z"]

    def run():
        copyto(z, i["y"])                                   # z = y
        cb.gemv("N", i["a"], i["A"], i["x"], i["b"], z)     # z = a A x + b z
    return run


def _sgemvt(cb, copyto, i, o) -> Run:
    A, x, w = i["A"], o["x"], o["w"]

    def run():
        copyto(x, i["z"])                                   # x = z
        cb.gemv("T", i["b"], A, i["y"], 1.0, x)             # x = b A^T y + x
        cb.gemv("N", i["a"], A, x, 0.0, w)                  # w = a A x
    return run


def _sscal(cb, copyto, i, o) -> Run:
    # The paper's SSCAL is in place (x = a x): one read and one write, the traffic of kfuse's
    # out-of-place version.  Scale a private copy of x in place, alternating a and 1/a so that
    # repetitions keep the data bounded; the first call (the checked one) applies a.
    x = o["ax"]
    copyto(x, i["x"])
    scales, calls = (i["a"], 1.0 / i["a"]), [0]

    def run():
        cb.scal(scales[calls[0] % 2], x)
        calls[0] += 1
    return run


def _gemver(cb, copyto, i, o) -> Run:
    B, x, w = o["B"], o["x"], o["w"]

    def run():
        copyto(B, i["A"])                                   # B = A
        cb.ger(1.0, i["u1"], i["v1"], B)                    # B += u1 v1^T
        cb.ger(1.0, i["u2"], i["v2"], B)                    # B += u2 v2^T
        copyto(x, i["z"])                                   # x = z
        cb.gemv("T", i["b"], B, i["y"], 1.0, x)             # x = b B^T y + x
        cb.gemv("N", i["a"], B, x, 0.0, w)                  # w = a B x
    return run


def _gesummv(cb, copyto, i, o) -> Run:
    y = o["y"]

    def run():
        cb.gemv("N", i["a"], i["A"], i["x"], 0.0, y)        # y = a A x
        cb.gemv("N", i["b"], i["B"], i["x"], 1.0, y)        # y = b B x + y
    return run


def _madd(cb, copyto, i, o) -> Run:
    def run():
        cb.geam("N", "N", 1.0, i["A"], 1.0, i["B"], out=o["C"])    # C = A + B
    return run


def _vadd(cb, copyto, i, o) -> Run:
    x = o["x"]

    def run():
        copyto(x, i["w"])                   # x = w
        cb.axpy(1.0, i["y"], x)             # x += y
        cb.axpy(1.0, i["z"], x)             # x += z
    return run


def _waxpby(cb, copyto, i, o) -> Run:
    w = o["w"]

    def run():
        copyto(w, i["y"])                   # w = y
        cb.scal(i["b"], w)                  # w = b w
        cb.axpy(i["a"], i["x"], w)          # w += a x
    return run


CUBLAS_SEQUENCES: dict[str, CublasBuilder] = {
    "axpydot": _axpydot, "atax": _atax, "bicgk": _bicgk, "sgemv": _sgemv, "sgemvt": _sgemvt,
    "sscal": _sscal, "gemver": _gemver, "gesummv": _gesummv, "madd": _madd, "vadd": _vadd,
    "waxpby": _waxpby,
}


# --- PyTorch -------------------------------------------------------------------------------------

def torch_sequences(T) -> dict[str, Callable]:
    """Sequence name -> function of the script's inputs, written with the module ``T`` (torch)."""

    def axpydot(a, w, v, u):
        z = w - a * v
        return z, T.dot(z, u)

    def atax(A, x):
        return T.mv(A.T, T.mv(A, x))

    def bicgk(A, p, r):
        return T.mv(A, p), T.mv(A.T, r)

    def sgemv(a, A, x, b, y):
        return T.addmv(y, A, x, beta=b, alpha=a)

    def sgemvt(a, b, A, y, z):
        x = T.addmv(z, A.T, y, alpha=b)
        return x, a * T.mv(A, x)

    def sscal(a, x):
        return a * x

    def gemver(a, b, A, u1, v1, u2, v2, y, z):
        B = A + T.outer(u1, v1) + T.outer(u2, v2)
        x = T.addmv(z, B.T, y, alpha=b)
        return B, x, a * T.mv(B, x)

    def gesummv(a, b, A, B, x):
        return a * T.mv(A, x) + b * T.mv(B, x)

    def madd(A, B):
        return A + B

    def vadd(w, y, z):
        return w + y + z

    def waxpby(a, b, x, y):
        return a * x + b * y

    return {"axpydot": axpydot, "atax": atax, "bicgk": bicgk, "sgemv": sgemv, "sgemvt": sgemvt,
            "sscal": sscal, "gemver": gemver, "gesummv": gesummv, "madd": madd, "vadd": vadd,
            "waxpby": waxpby}


# --- availability --------------------------------------------------------------------------------

def load_cublas() -> tuple[Any, str | None]:
    """(cupy.cublas, None), or (None, why not)."""
    try:
        from cupy import cublas
    except ImportError as e:
        return None, f"cupy.cublas is not importable ({e})"
    return cublas, None


def load_torch() -> tuple[Any, str | None]:
    """(torch, None) when PyTorch with a CUDA device is importable, or (None, why not)."""
    try:
        import torch
    except ImportError as e:
        return None, f"PyTorch is not importable ({e})"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} sees no CUDA device"
    return torch, None
