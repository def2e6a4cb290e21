"""The CUDA driver calls kfuse makes itself, through ``ctypes`` (CuPy exposes neither launch
attributes nor a cheap way to launch with prepared arguments): ``cuLaunchKernelEx`` with the
programmatic-dependent-launch attribute, stream capture into graphs and graph launches.  Every
call's result is checked; a failure is a ``LaunchError`` naming the call and the CUDA error."""
from __future__ import annotations

import ctypes

from ..errors import LaunchError

PROGRAMMATIC_STREAM_SERIALIZATION = 6     # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
CAPTURE_MODE_THREAD_LOCAL = 1             # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
STREAM_NON_BLOCKING = 1                   # CU_STREAM_NON_BLOCKING
CAPTURE_STATUS_NONE = 0                   # CU_STREAM_CAPTURE_STATUS_NONE


class AttrValue(ctypes.Union):           # CUlaunchAttributeValue: a 64-byte union
    _fields_ = [("pad", ctypes.c_char * 64), ("align", ctypes.c_void_p), ("flag", ctypes.c_int)]


class Attr(ctypes.Structure):            # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", AttrValue)]


class Config(ctypes.Structure):          # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(Attr)), ("numAttrs", ctypes.c_uint)]


_P = ctypes.c_void_p
_SIGNATURES = {
    "cuLaunchKernelEx": [ctypes.POINTER(Config), _P, ctypes.POINTER(_P), _P],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuStreamCreate": [ctypes.POINTER(_P), ctypes.c_uint],
    "cuStreamBeginCapture_v2": [_P, ctypes.c_int],
    "cuStreamEndCapture": [_P, ctypes.POINTER(_P)],
    "cuStreamIsCapturing": [_P, ctypes.POINTER(ctypes.c_int)],
    "cuGraphInstantiateWithFlags": [ctypes.POINTER(_P), _P, ctypes.c_ulonglong],
    "cuGraphLaunch": [_P, _P],
    "cuGraphDestroy": [_P],
    "cuGraphExecDestroy": [_P],
    "cuStreamSynchronize": [_P],
    "cuOccupancyMaxActiveClusters": [ctypes.POINTER(ctypes.c_int), _P, ctypes.POINTER(Config)],
}

_driver: list = []      # [libcuda or None], loaded on first use


def libcuda():
    """The driver library with the signatures kfuse uses, or None (no driver, or older than CUDA 12)."""
    if not _driver:
        lib = None
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for name, argtypes in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.argtypes = argtypes
                fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            lib = None
        _driver.append(lib)
    return _driver[0]


def error_name(rc: int) -> str:
    msg = ctypes.c_char_p()
    lib = libcuda()
    if lib is None or lib.cuGetErrorName(rc, ctypes.byref(msg)) != 0:
        return f"CUDA error {rc}"
    return (msg.value or b"CUDA error").decode()


def check(rc: int, what: str) -> None:
    if rc != 0:
        raise LaunchError(f"{what} failed: {error_name(rc)} ({rc})")


def create_stream() -> int:
    """A new non-blocking stream (kept for the life of the process)."""
    s = _P()
    check(libcuda().cuStreamCreate(ctypes.byref(s), STREAM_NON_BLOCKING), "cuStreamCreate")
    return s.value or 0


def require() -> None:
    if libcuda() is None:
        raise LaunchError("the CUDA driver library (libcuda.so.1, CUDA 12 or later) could not be loaded")


def handle(function) -> _P:
    """The CUfunction of a CuPy kernel function."""
    return _P(function.kernel.ptr if hasattr(function, "kernel") else function.ptr)


def max_active_clusters(function, threads: int, cluster: int) -> int:
    """Clusters of ``function`` (compiled for clusters of ``cluster`` blocks of ``threads``
    threads) that the GPU runs at once: a cluster's blocks share one GPU processing cluster, so
    this can be fewer than the multiprocessors' block slots divided by the cluster size."""
    n = ctypes.c_int()
    cfg = Config(cluster, 1, 1, threads, 1, 1, 0, None, None, 0)
    check(libcuda().cuOccupancyMaxActiveClusters(ctypes.byref(n), handle(function), ctypes.byref(cfg)),
          "cuOccupancyMaxActiveClusters")
    return n.value


def synchronize(stream: int) -> None:
    """Wait for the stream; an error of an earlier kernel surfaces here."""
    check(libcuda().cuStreamSynchronize(_P(stream)), "kernel execution (cuStreamSynchronize)")


def is_capturing(stream: int) -> bool:
    status = ctypes.c_int()
    check(libcuda().cuStreamIsCapturing(_P(stream), ctypes.byref(status)), "cuStreamIsCapturing")
    return status.value != CAPTURE_STATUS_NONE


class GraphExec:
    """An instantiated CUDA graph captured from the launches ``record(stream)`` makes."""

    def __init__(self, stream: int, record):
        lib = libcuda()
        self._lib, self.handle = lib, None
        check(lib.cuStreamBeginCapture_v2(_P(stream), CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")
        graph = _P()
        try:
            record(stream)
        finally:
            rc = lib.cuStreamEndCapture(_P(stream), ctypes.byref(graph))
        check(rc, "cuStreamEndCapture")
        exec_ = _P()
        try:
            check(lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0), "cuGraphInstantiate")
        finally:
            lib.cuGraphDestroy(graph)
        self.handle = exec_

    def launch(self, stream: int) -> None:
        rc = self._lib.cuGraphLaunch(self.handle, stream)
        if rc != 0:
            check(rc, "cuGraphLaunch")

    def __del__(self):
        if self.handle is not None and self.handle.value:
            self._lib.cuGraphExecDestroy(self.handle)
            self.handle = None
