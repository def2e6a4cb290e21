"""Programmatic dependent launch (PDL) through the CUDA driver.

A kernel whose reduced outputs must be cleared first used to wait for a memset: the memset's
launch, its run and the kernel's launch came one after the other.  With PDL the clear is kfuse's own ``kf_fill`` kernel, which lets the
next kernel launch at once (``griddepcontrol.launch_dependents``), and the kernel, launched with
the programmatic-stream-serialization attribute, waits for the clear only where it first
touches a cleared output (``kf_wait_prior`` in the generated code).  A kernel after another
kernel of the plan is launched the same way and waits where it first reads what an earlier kernel
wrote.  Why: docs/design.md, 'Clears and fills'.
The first kernel of a plan whose clears are for later kernels only (CG's step: a gemv, then the
dot products adding into cleared scalars) is launched early too and waits at its end, and a fill
after a fill likewise: the kernels that wait for it then find every clear before it done
(docs/design.md, 'Clears and fills').

CuPy launches kernels with ``cuLaunchKernel``, which takes no launch attributes, so every
kfuse launch goes through ``cuLaunchKernelEx`` of the driver library (``driver.py``), with its
configuration and argument block prepared once per argument signature and only the pointers,
scalars and stream patched per call (``KernelLaunch``).  PDL needs
compute capability 9.0 or later and CUDA 12 or later; elsewhere, or with ``KFUSE_PDL=0`` in
the environment, kernels launch the ordinary way after the clear (the device functions are
no-ops then).
"""
from __future__ import annotations

import copy
import ctypes

import numpy as np

from ..env import switch
from ..errors import LaunchError
from . import driver
from .gpu import cupy

_CTYPES = {np.dtype(np.int32): ctypes.c_int, np.dtype(np.int64): ctypes.c_longlong,
           np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double,
           np.dtype(np.uint64): ctypes.c_ulonglong}     # uint64: a conditional graph handle


def pdl_available(device: int) -> bool:
    """Whether kernels on this device can be launched programmatically dependent."""
    if not switch("KFUSE_PDL"):
        return False
    cp = cupy()
    if int(cp.cuda.Device(device).compute_capability) < 90:
        return False
    return driver.libcuda() is not None


class PackedArgs:
    """Kernel arguments as the driver takes them: an array of pointers to each value, kept
    alive with the values.  Arrays pass their device pointer (a ``c_void_p`` that a later call
    may patch), NumPy scalars their C type."""

    def __init__(self, args: tuple):
        self.values: list = []
        for a in args:
            if isinstance(a, np.generic) and a.dtype in _CTYPES:
                self.values.append(_CTYPES[a.dtype](a.item()))
            elif isinstance(a, int):
                self.values.append(ctypes.c_void_p(a))          # a device pointer
            elif hasattr(a, "data") and hasattr(a.data, "ptr"):
                self.values.append(ctypes.c_void_p(a.data.ptr))   # a CuPy array
            else:
                raise LaunchError(f"cannot pass a {type(a).__name__} to a kernel launched by the driver")
        self.pointers = (ctypes.c_void_p * max(1, len(self.values)))(
            *[ctypes.addressof(v) for v in self.values])


class KernelLaunch:
    """One launch with its configuration prepared: ``launch(stream)`` only sets the stream and
    calls the driver.  ``dependent``: the kernel may start before the previous launch in the
    stream has finished (it calls kf_wait_prior before using what that launch writes)."""

    def __init__(self, function, grid: int | tuple[int, ...], threads: int, args: PackedArgs, name: str,
                 dependent: bool = False, cooperative: bool = False):
        g = ((grid,) if isinstance(grid, int) else tuple(grid)) + (1, 1)
        self.grid, self.threads, self.args, self.name, self.dependent = g[0], threads, args, name, dependent
        self._attr = driver.Attr()
        # cooperative: all blocks resident at once, or the launch fails (a persistent kernel's grid barriers)
        self._attr.id = driver.COOPERATIVE if cooperative else driver.PROGRAMMATIC_STREAM_SERIALIZATION
        self._attr.value.flag = 1
        attrs = dependent or cooperative
        self._cfg = driver.Config(g[0], g[1], g[2], threads, 1, 1, 0, None,
                                  ctypes.pointer(self._attr) if attrs else None, 1 if attrs else 0)
        self._cfg_ref = ctypes.byref(self._cfg)
        self._handle = driver.handle(function)
        self._call = driver.libcuda().cuLaunchKernelEx

    def independent(self) -> "KernelLaunch":
        """This launch made the ordinary way, after everything before it in the stream has
        finished (the same argument block): the first launch of a loop step whose fills moved to
        the step before (``runtime/loop.py``)."""
        other = copy.copy(self)
        c = self._cfg
        other._cfg = driver.Config(c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ,
                                   c.sharedMemBytes, None, None, 0)
        other._cfg_ref = ctypes.byref(other._cfg)
        other.dependent = False
        return other

    def launch(self, stream: int) -> None:
        self._cfg.hStream = stream
        rc = self._call(self._cfg_ref, self._handle, self.args.pointers, None)
        if rc != 0:
            raise LaunchError(f"launch of {self.name} (grid {self.grid}, block {self.threads}) failed: "
                              f"{driver.error_name(rc)} ({rc})")


def launch_dependent(function, grid: int | tuple[int, ...], threads: int, packed: PackedArgs, name: str) -> None:
    """Launch a kernel on the current CuPy stream, dependent on the launch before it (PDL)."""
    KernelLaunch(function, grid, threads, packed, name, dependent=True).launch(cupy().cuda.get_current_stream().ptr)
