"""Programmatic dependent launch (PDL) through the CUDA driver.

A kernel whose reduced outputs must be cleared first used to wait for a memset: the memset's
launch, its run and the kernel's launch came one after the other.  With PDL the clear is kfuse's own ``kf_fill`` kernel, which lets the
next kernel launch at once (``griddepcontrol.launch_dependents``), and the kernel, launched with
the programmatic-stream-serialization attribute, waits for the clear only where it first
touches a cleared output (``kf_wait_prior`` in the generated code).  A kernel after another
kernel of the plan is launched the same way and waits where it first reads what an earlier kernel
wrote.  What both save on the H100: docs/experiments/README.md, 'Clears of reduced outputs'.

CuPy launches kernels with ``cuLaunchKernel``, which takes no launch attributes, so the
launch goes through ``cuLaunchKernelEx`` of the driver library (``ctypes``).  PDL needs
compute capability 9.0 or later and CUDA 12 or later; elsewhere, or with ``KFUSE_PDL=0`` in
the environment, kernels launch the ordinary way after the clear (the device functions are
no-ops then).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..errors import LaunchError
from .gpu import cupy

_PROGRAMMATIC_STREAM_SERIALIZATION = 6     # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


class _AttrValue(ctypes.Union):          # CUlaunchAttributeValue: a 64-byte union
    _fields_ = [("pad", ctypes.c_char * 64), ("align", ctypes.c_void_p), ("flag", ctypes.c_int)]


class _Attr(ctypes.Structure):           # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _Config(ctypes.Structure):         # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attr)), ("numAttrs", ctypes.c_uint)]


_driver: list = []      # [libcuda or None], loaded on first use


def _libcuda():
    if not _driver:
        lib = None
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p,
                                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
            lib.cuLaunchKernelEx.restype = ctypes.c_int
            lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        except (OSError, AttributeError):
            lib = None           # no driver library, or one older than CUDA 12
        _driver.append(lib)
    return _driver[0]


def pdl_available(device: int) -> bool:
    """Whether kernels on this device can be launched programmatically dependent."""
    if os.environ.get("KFUSE_PDL", "1") == "0":
        return False
    cp = cupy()
    if int(cp.cuda.Device(device).compute_capability) < 90:
        return False
    return _libcuda() is not None


class PackedArgs:
    """Kernel arguments as the driver takes them: an array of pointers to each value, kept
    alive with the values.  Arrays pass their device pointer; NumPy scalars their C type."""
    _CTYPES = {np.dtype(np.int32): ctypes.c_int, np.dtype(np.int64): ctypes.c_longlong,
               np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}

    def __init__(self, args: tuple):
        cp = cupy()
        self.values = []
        for a in args:
            if isinstance(a, cp.ndarray):
                self.values.append(ctypes.c_void_p(a.data.ptr))
            elif isinstance(a, np.generic) and a.dtype in self._CTYPES:
                self.values.append(self._CTYPES[a.dtype](a.item()))
            else:
                raise LaunchError(f"cannot pass a {type(a).__name__} to a kernel launched by the driver")
        self.pointers = (ctypes.c_void_p * max(1, len(self.values)))(
            *[ctypes.addressof(v) for v in self.values])


def launch_dependent(function, grid: int | tuple[int, ...], threads: int, packed: PackedArgs, name: str) -> None:
    """Launch a kernel (grid: blocks, or blocks along x, y, z) that may start before the previous
    kernel in the stream has finished (it must call kf_wait_prior before using what that kernel
    writes)."""
    cp = cupy()
    lib = _libcuda()
    attr = _Attr()
    attr.id = _PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.flag = 1
    g = ((grid,) if isinstance(grid, int) else tuple(grid)) + (1, 1)
    cfg = _Config(g[0], g[1], g[2], threads, 1, 1, 0, cp.cuda.get_current_stream().ptr, ctypes.pointer(attr), 1)
    handle = function.kernel.ptr if hasattr(function, "kernel") else function.ptr
    rc = lib.cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(handle), packed.pointers, None)
    if rc != 0:
        msg = ctypes.c_char_p()
        lib.cuGetErrorName(rc, ctypes.byref(msg))
        raise LaunchError(f"launch of {name} (grid {grid}, block {threads}) failed: "
                          f"{(msg.value or b'CUDA error').decode()} ({rc})")
