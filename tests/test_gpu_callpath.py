"""The call path on the GPU (run with -m gpu): plain calls, repeated calls replayed from CUDA
graphs, new pointers under a known signature, the caller's streams, torch in -> torch out,
CUDA-array producers, and kfuse inside a caller's own graph capture; every result against the
float64 reference with outputs poisoned first."""
import numpy as np
import pytest

import kfuse
from kfuse.reference import device_case, evaluate, relative_error

from conftest import ROOT

pytestmark = pytest.mark.gpu
TOL = {"float32": 1e-5, "float64": 1e-12}
NAMES = ["bicgk", "gemver", "axpydot", "sscal", "atax", "waxpby"]
_compiled = {}


def compiled(name, dtype):
    if (name, dtype) not in _compiled:
        _compiled[name, dtype] = kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dtype)
    return _compiled[name, dtype]


def case(prog, size, seed):
    dims = {d.id: size for d in prog.program.dims}
    return device_case(prog.program, dims, prog.dtype, seed)


def check(prog, got, host, to_numpy=None):
    import cupy as cp
    p = prog.program
    got = got if isinstance(got, tuple) else (got,)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    for v, g in zip(p.outputs, got):
        arr = to_numpy(g) if to_numpy else cp.asnumpy(g)
        err = relative_error(arr, ref[v.id], mag[v.id])
        assert err < TOL[prog.dtype], (v.name, err)


def refill(dev, fresh):
    """Copy fresh values into the same device arrays (pointers unchanged)."""
    for k, v in fresh.items():
        if hasattr(v, "ndim"):
            dev[k][...] = v


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [1, 33, 1000, 4097])
@pytest.mark.parametrize("name", NAMES)
def test_plain_repeated_and_replayed_calls(name, size, dtype):
    """Plain calls with kfuse's own outputs (their pool block poisoned by the call before),
    repeated calls on the same arrays with fresh data (replayed from a graph from the second
    on), and calls with new arrays of the same signature (new pointers)."""
    import cupy as cp
    prog = compiled(name, dtype)
    dev, host, outs = case(prog, size, 0)
    for seed in range(1, 5):                   # same arrays, fresh data: graph capture and replays
        fresh, host_s, _ = case(prog, size, seed)
        refill(dev, fresh)
        host_s = {k: (v if isinstance(v, np.ndarray) else host[k]) for k, v in host_s.items()}
        for o in outs.values():
            o.fill(np.nan)
        got = prog(out=outs, sync=True, **dev)
        check(prog, got, host_s)
    for seed in range(5, 8):                   # own outputs; the block of the last result poisoned
        got = prog(sync=True, **dev)
        check(prog, got, host_s)
        for g in (got if isinstance(got, tuple) else (got,)):
            g.fill(np.nan)
        del got
    for seed in range(8, 11):                  # new arrays, same signature: new pointers
        dev2, host2, outs2 = case(prog, size, seed)
        check(prog, prog(out=outs2, sync=True, **dev2), host2)
        check(prog, prog(sync=True, **dev2), host2)
    cp.cuda.get_current_stream().synchronize()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["bicgk", "gemver", "axpydot"])
def test_bound_call_replays_on_fresh_data(name, dtype):
    prog = compiled(name, dtype)
    dev, host, outs = case(prog, 1000, 0)
    bound = prog.bind(out=outs, **dev)
    for seed in range(1, 5):
        fresh, host_s, _ = case(prog, 1000, seed)
        refill(dev, fresh)
        host_s = {k: (v if isinstance(v, np.ndarray) else host[k]) for k, v in host_s.items()}
        for o in outs.values():
            o.fill(np.nan)
        check(prog, bound(sync=True), host_s)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cupy_stream_orders_with_the_streams_work(dtype):
    """On a non-default CuPy stream, the call runs after the stream's earlier work (inputs
    written there) and before its later work (results read there), with no sync in between."""
    import cupy as cp
    prog = compiled("gemver", dtype)
    dev, host, _ = case(prog, 1000, 0)
    fresh, host2, _ = case(prog, 1000, 1)
    host2 = {k: (v if isinstance(v, np.ndarray) else host[k]) for k, v in host2.items()}
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for _ in range(3):
            big = cp.random.standard_normal(2**24)      # keep the stream busy first
            refill(dev, fresh)
            got = prog(**dev)
            copies = [g.copy() for g in (got if isinstance(got, tuple) else (got,))]
            del big
    s.synchronize()
    check(prog, tuple(copies) if len(copies) > 1 else copies[0], host2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["bicgk", "axpydot"])
def test_torch_in_torch_out_on_torch_stream(name, dtype):
    torch = pytest.importorskip("torch")
    import cupy as cp
    prog = compiled(name, dtype)
    dev, host, _ = case(prog, 1000, 0)
    tdev = {k: (torch.as_tensor(cp.asnumpy(v), device="cuda") if hasattr(v, "ndim") else v)
            for k, v in dev.items()}
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            got = prog(**tdev)
            res = tuple(g.clone() for g in (got if isinstance(got, tuple) else (got,)))
    s.synchronize()
    assert all(isinstance(g, torch.Tensor) and g.is_cuda for g in res)
    check(prog, res if len(res) > 1 else res[0], host, to_numpy=lambda g: g.cpu().numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inside_a_torch_graph_capture(dtype):
    """kfuse's launches recorded into the caller's torch.cuda.graph; the replay on fresh input
    data gives the fresh results."""
    torch = pytest.importorskip("torch")
    import cupy as cp
    prog = compiled("bicgk", dtype)
    dev, host, _ = case(prog, 1000, 0)
    tdev = {k: (torch.as_tensor(cp.asnumpy(v), device="cuda") if hasattr(v, "ndim") else v)
            for k, v in dev.items()}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        prog(**tdev)                           # warm-up: binding built, modules loaded
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = prog(**tdev)
    fresh, host2, _ = case(prog, 1000, 1)
    for k, v in fresh.items():
        if hasattr(v, "ndim"):
            tdev[k].copy_(torch.as_tensor(cp.asnumpy(v), device="cuda"))
    for t in got:
        t.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    host2 = {k: (v if isinstance(v, np.ndarray) else host[k]) for k, v in host2.items()}
    check(prog, got, host2, to_numpy=lambda t: t.cpu().numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inside_a_cupy_stream_capture(dtype):
    import cupy as cp
    prog = compiled("gemver", dtype)
    dev, host, outs = case(prog, 1000, 0)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        prog(out=outs, **dev)                  # warm-up outside the capture
        s.synchronize()
        s.begin_capture()
        prog(out=outs, **dev)
        graph = s.end_capture()
        fresh, host2, _ = case(prog, 1000, 1)
        refill(dev, fresh)
        for o in outs.values():
            o.fill(np.nan)
        graph.launch()
    s.synchronize()
    host2 = {k: (v if isinstance(v, np.ndarray) else host[k]) for k, v in host2.items()}
    check(prog, tuple(outs[v.name] for v in prog.program.outputs), host2)


class _CAI:
    """A foreign CUDA array: only __cuda_array_interface__."""
    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = a.__cuda_array_interface__


class _DLPack:
    """A foreign CUDA array: only __dlpack__ / __dlpack_device__."""
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("wrap", [_CAI, _DLPack])
def test_cuda_array_producers(wrap):
    prog = compiled("bicgk", "float64")
    dev, host, _ = case(prog, 333, 0)
    wrapped = {k: (wrap(v) if hasattr(v, "ndim") else v) for k, v in dev.items()}
    check(prog, prog(sync=True, **wrapped), host)


def test_signature_change_rebinds_and_checks():
    """A changed shape binds again (right results at the new size); a wrong argument after
    many good calls still gets its named error."""
    import cupy as cp
    prog = compiled("bicgk", "float32")
    for size in (100, 200, 100):
        dev, host, _ = case(prog, size, size)
        for _ in range(3):
            check(prog, prog(sync=True, **dev), host)
    bad = dict(dev, p=dev["p"][:-1].copy())
    with pytest.raises(kfuse.LaunchError, match="p: length is 99"):
        prog(**bad)
    with pytest.raises(kfuse.LaunchError, match="dtype is float64"):
        prog(**dict(dev, A=dev["A"].astype(cp.float64)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["gemver", "bicgk", "atax"])
def test_values_kept_on_chip_get_no_memory(name, dtype):
    """Only the values some kernel reads or writes by address get device memory (GEMVER's B1 is
    n x n and stays in registers when both rank-1 updates share a kernel: 16 GiB at n = 65536)."""
    prog = compiled(name, dtype)
    dev, host, outs = case(prog, 1000, 3)
    bound = prog.bind(out=outs, **dev)
    b = bound.binding
    addressed = {g.value.name for code in b.artifact.kernels for g in code.launch.args if g.value is not None}
    given = {v.name for v in b.prog.values if v.id in b.offsets}
    assert given <= addressed, sorted(given - addressed)
    names = [v.name for v in b.prog.values]
    assert b.tmp_bytes <= sum(b.nbytes[n] for n in given) + 256 * len(given)
    if name == "gemver" and not any("B1" in {g.value.name for g in code.launch.args if g.value is not None}
                                   for code in b.artifact.kernels):
        assert "B1" not in given and "B1" in names
    for o in outs.values():
        o.fill(np.nan)
    check(prog, bound(sync=True), host)
