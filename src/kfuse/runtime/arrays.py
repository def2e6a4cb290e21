"""Checking and converting the arrays and scalars a program is called with."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import LaunchError
from .gpu import cupy


def to_cupy(x, name: str):
    """A CuPy array for a CuPy array or a torch CUDA tensor (zero copy); errors name the argument."""
    cp = cupy()
    if isinstance(x, cp.ndarray):
        return x
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        if not x.is_cuda:
            raise LaunchError(f"{name}: torch tensor is on {x.device}; move it to the GPU (.cuda())")
        return cp.asarray(x.detach())
    if isinstance(x, np.ndarray):
        raise LaunchError(f"{name}: a NumPy array lives in host memory; pass a CuPy array or a torch "
                          "CUDA tensor (cupy.asarray(x) copies it to the GPU)")
    raise LaunchError(f"{name}: expected a CuPy array or a torch CUDA tensor, got {type(x).__name__}")


def to_scalar(x, name: str, dtype: np.dtype):
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, np.generic)) or isinstance(x, np.bool_):
        cp = cupy()
        if isinstance(x, cp.ndarray) and x.ndim == 0:
            return dtype.type(x.item())
        raise LaunchError(f"{name}: expected a real number for a scalar input, got {type(x).__name__}")
    value = dtype.type(x)
    if not np.isfinite(value) and np.isfinite(float(x)):
        raise LaunchError(f"{name}: {x!r} does not fit in {dtype}")
    return value


def check_array(arr, name: str, ndim: int, dtype: np.dtype, device: int) -> None:
    if arr.ndim != ndim:
        kind = {1: "a vector (1-D)", 2: "a matrix (2-D)"}[ndim]
        raise LaunchError(f"{name}: expected {kind} array, got shape {tuple(arr.shape)}")
    if arr.dtype != dtype:
        raise LaunchError(f"{name}: dtype is {arr.dtype}, the program was compiled for {dtype} "
                          f"(convert with .astype({dtype.name}) or compile with dtype={arr.dtype.name!r})")
    if arr.device.id != device:
        raise LaunchError(f"{name}: array is on GPU {arr.device.id}, the program runs on GPU {device}")
    if not arr.flags.c_contiguous:
        raise LaunchError(f"{name}: array is not C-contiguous (row-major); pass a contiguous copy "
                          "(cupy.ascontiguousarray)")
    if arr.size == 0:
        raise LaunchError(f"{name}: array is empty; sizes must be at least 1")


def span(arr) -> tuple[int, int]:
    start = arr.data.ptr
    return start, start + arr.nbytes


def check_no_overlap(named: dict[str, object], outputs: set[str]) -> None:
    """Outputs must not share memory with any other argument."""
    items = list(named.items())
    for n, (a, x) in enumerate(items):
        for b, y in items[n + 1:]:
            if a not in outputs and b not in outputs:
                continue            # inputs may alias each other: they are only read
            (s1, e1), (s2, e2) = span(x), span(y)
            if s1 < e2 and s2 < e1:
                raise LaunchError(f"{a} and {b} share memory; an output must not alias another argument")
