"""The CUDA driver calls kfuse makes itself, through ``ctypes`` (CuPy exposes neither launch
attributes nor a cheap way to launch with prepared arguments): ``cuLaunchKernelEx`` with the
programmatic-dependent-launch attribute, stream capture into graphs, graph launches, and the
conditional graph nodes (IF, WHILE; drivers of CUDA 12.4 and later) that device loops are built
of (``runtime/loopgraph.py``).  Every call's result is checked; a failure is a ``LaunchError``
naming the call and the CUDA error."""
from __future__ import annotations

import ctypes

from ..errors import LaunchError

PROGRAMMATIC_STREAM_SERIALIZATION = 6     # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
COOPERATIVE = 2                           # CU_LAUNCH_ATTRIBUTE_COOPERATIVE
CAPTURE_MODE_THREAD_LOCAL = 1             # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
STREAM_NON_BLOCKING = 1                   # CU_STREAM_NON_BLOCKING
CAPTURE_STATUS_NONE = 0                   # CU_STREAM_CAPTURE_STATUS_NONE
NODE_CONDITIONAL = 13                     # CU_GRAPH_NODE_TYPE_CONDITIONAL
COND_IF, COND_WHILE = 0, 1                # CU_GRAPH_COND_TYPE_IF / _WHILE
COND_ASSIGN_DEFAULT = 1                   # CU_GRAPH_COND_ASSIGN_DEFAULT: the default value at every launch
SET_CAPTURE_DEPENDENCIES = 1              # CU_STREAM_SET_CAPTURE_DEPENDENCIES
CONDITIONAL_DRIVER = 12040                # the first driver with conditional nodes set from kernels


class AttrValue(ctypes.Union):           # CUlaunchAttributeValue: a 64-byte union
    _fields_ = [("pad", ctypes.c_char * 64), ("align", ctypes.c_void_p), ("flag", ctypes.c_int)]


class Attr(ctypes.Structure):            # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", AttrValue)]


class Config(ctypes.Structure):          # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(Attr)), ("numAttrs", ctypes.c_uint)]


class CondParams(ctypes.Structure):      # CUDA_CONDITIONAL_NODE_PARAMS
    _fields_ = [("handle", ctypes.c_ulonglong), ("type", ctypes.c_int), ("size", ctypes.c_uint),
                ("phGraph_out", ctypes.POINTER(ctypes.c_void_p)), ("ctx", ctypes.c_void_p)]


class _NodeUnion(ctypes.Union):
    _fields_ = [("reserved1", ctypes.c_longlong * 29), ("conditional", CondParams)]


class NodeParams(ctypes.Structure):      # CUgraphNodeParams: 256 bytes
    _fields_ = [("type", ctypes.c_int), ("reserved0", ctypes.c_int * 3), ("u", _NodeUnion),
                ("reserved2", ctypes.c_longlong)]


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
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [ctypes.POINTER(ctypes.c_int), _P, ctypes.c_int, ctypes.c_size_t],
    "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "cuCtxGetCurrent": [ctypes.POINTER(_P)],
    "cuGraphCreate": [ctypes.POINTER(_P), ctypes.c_uint],
    "cuEventCreate": [ctypes.POINTER(_P), ctypes.c_uint],
    "cuEventRecord": [_P, _P],
    "cuEventSynchronize": [_P],
    "cuEventDestroy_v2": [_P],
}
# calls of newer drivers (CUDA 12.3-12.4): device loops need them, nothing else does
_OPTIONAL = {
    "cuStreamBeginCaptureToGraph": [_P, _P, _P, _P, ctypes.c_size_t, ctypes.c_int],
    "cuStreamGetCaptureInfo_v3": [_P, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_ulonglong),
                                  ctypes.POINTER(_P), ctypes.POINTER(ctypes.POINTER(_P)), ctypes.POINTER(_P),
                                  ctypes.POINTER(ctypes.c_size_t)],
    "cuStreamUpdateCaptureDependencies_v2": [_P, ctypes.POINTER(_P), _P, ctypes.c_size_t, ctypes.c_uint],
    "cuGraphAddNode_v2": [ctypes.POINTER(_P), _P, _P, _P, ctypes.c_size_t, ctypes.POINTER(NodeParams)],
    "cuGraphConditionalHandleCreate": [ctypes.POINTER(ctypes.c_ulonglong), _P, _P, ctypes.c_uint, ctypes.c_uint],
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
            for name, argtypes in _OPTIONAL.items():
                fn = getattr(lib, name, None)
                if fn is not None:
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


def max_active_blocks(function, threads: int) -> int:
    """Blocks of ``function`` (``threads`` threads, its static shared memory) that one
    multiprocessor runs at once."""
    n = ctypes.c_int()
    check(libcuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), handle(function), threads, 0),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    return n.value


def synchronize(stream: int) -> None:
    """Wait for the stream; an error of an earlier kernel surfaces here."""
    check(libcuda().cuStreamSynchronize(_P(stream)), "kernel execution (cuStreamSynchronize)")


LEGACY_STREAMS = (0, 1)     # the legacy default stream (0, or cudaStreamLegacy): never captured


def is_capturing(stream: int) -> bool:
    """Whether ``stream`` is being captured into a graph (by the caller: kfuse then launches its
    kernels into the capture rather than replaying its own graph).  The legacy default stream,
    where a plain CuPy program launches, cannot be captured: answered without a driver call,
    which the fed-back call makes every time."""
    if stream in LEGACY_STREAMS:
        return False
    status = ctypes.c_int()
    check(libcuda().cuStreamIsCapturing(_P(stream), ctypes.byref(status)), "cuStreamIsCapturing")
    return status.value != CAPTURE_STATUS_NONE


class GraphExec:
    """An instantiated CUDA graph: captured from the launches ``record(stream)`` makes, or
    (``GraphExec.of(graph)``) a graph built by hand.  ``captures`` counts the graphs instantiated
    in this process (the tests check that a loop replays rather than captures)."""
    captures = 0

    def __init__(self, stream: int | None, record=None, graph: _P | None = None):
        lib = libcuda()
        self._lib, self.handle = lib, None
        if graph is None:
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
        GraphExec.captures += 1

    @classmethod
    def of(cls, graph: _P) -> "GraphExec":
        """Instantiate a graph built by hand (the graph itself is destroyed)."""
        return cls(None, graph=graph)

    def launch(self, stream: int) -> None:
        rc = self._lib.cuGraphLaunch(self.handle, stream)
        if rc != 0:
            check(rc, "cuGraphLaunch")

    def __del__(self):
        if self.handle is not None and self.handle.value:
            self._lib.cuGraphExecDestroy(self.handle)
            self.handle = None


# -- graphs built by hand: device loops ---------------------------------------------------------------
def has_conditional_nodes() -> bool:
    """Whether the driver has conditional graph nodes that kernels set (CUDA 12.4 and later), and
    every call that builds them."""
    lib = libcuda()
    if lib is None:
        return False
    version = ctypes.c_int()
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value < CONDITIONAL_DRIVER:
        return False
    return all(hasattr(lib, name) for name in _OPTIONAL)


def graph_create() -> _P:
    g = _P()
    check(libcuda().cuGraphCreate(ctypes.byref(g), 0), "cuGraphCreate")
    return g


def conditional_handle(graph: _P) -> int:
    """A conditional handle of ``graph`` whose value is 0 at every launch until a kernel sets it
    (``cudaGraphSetConditional``)."""
    lib = libcuda()
    ctx = _P()
    check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    h = ctypes.c_ulonglong()
    check(lib.cuGraphConditionalHandleCreate(ctypes.byref(h), graph, ctx, 0, COND_ASSIGN_DEFAULT),
          "cuGraphConditionalHandleCreate")
    return h.value


def capture_into(graph: _P, stream: int, record) -> None:
    """Append the launches ``record(stream)`` makes to ``graph`` (stream capture into an existing
    graph: the body of a conditional node)."""
    lib = libcuda()
    check(lib.cuStreamBeginCaptureToGraph(_P(stream), graph, None, None, 0, CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCaptureToGraph")
    out = _P()
    try:
        record(stream)
    finally:
        rc = lib.cuStreamEndCapture(_P(stream), ctypes.byref(out))
    check(rc, "cuStreamEndCapture")


def add_conditional(stream: int, handle: int, kind: int) -> _P:
    """In a stream being captured: a conditional node (``COND_IF`` / ``COND_WHILE``) after what was
    captured so far, before what is captured next; returns its (empty) body graph."""
    lib = libcuda()
    status, ident, graph = ctypes.c_int(), ctypes.c_ulonglong(), _P()
    deps, edges, n = ctypes.POINTER(_P)(), _P(), ctypes.c_size_t()
    check(lib.cuStreamGetCaptureInfo_v3(_P(stream), ctypes.byref(status), ctypes.byref(ident), ctypes.byref(graph),
                                        ctypes.byref(deps), ctypes.byref(edges), ctypes.byref(n)),
          "cuStreamGetCaptureInfo")
    ctx = _P()
    check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    params = NodeParams()
    params.type = NODE_CONDITIONAL
    cond = params.u.conditional
    cond.handle, cond.type, cond.size, cond.ctx = handle, kind, 1, ctx
    node = _P()
    check(lib.cuGraphAddNode_v2(ctypes.byref(node), graph, ctypes.cast(deps, _P) if n.value else None, None,
                                n.value, ctypes.byref(params)), "cuGraphAddNode (conditional)")
    check(lib.cuStreamUpdateCaptureDependencies_v2(_P(stream), ctypes.byref(node), None, 1,
                                                   SET_CAPTURE_DEPENDENCIES), "cuStreamUpdateCaptureDependencies")
    return _P(params.u.conditional.phGraph_out[0])


class Event:
    """A CUDA event without timing: ``record(stream)``, then ``wait()`` for the work before it."""

    def __init__(self):
        self._lib, self.handle = libcuda(), _P()
        check(self._lib.cuEventCreate(ctypes.byref(self.handle), 2), "cuEventCreate")     # CU_EVENT_DISABLE_TIMING

    def record(self, stream: int) -> None:
        check(self._lib.cuEventRecord(self.handle, _P(stream)), "cuEventRecord")

    def wait(self) -> None:
        check(self._lib.cuEventSynchronize(self.handle), "kernel execution (cuEventSynchronize)")

    def __del__(self):
        if self.handle:
            self._lib.cuEventDestroy_v2(self.handle)
            self.handle = _P()
