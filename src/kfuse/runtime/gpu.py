"""Lazy access to CuPy, with an error that says how to install it."""
from __future__ import annotations

from ..errors import LaunchError


def cupy():
    try:
        import cupy as cp
    except ImportError as e:
        raise LaunchError("running kernels needs CuPy: pip install 'kfuse[gpu]' "
                          f"(or cupy-cuda13x); compiling to CUDA works without it ({e})") from None
    return cp


def have_gpu() -> bool:
    try:
        import cupy as cp
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:   # noqa: BLE001 - any failure here means "no usable GPU"
        return False
