"""Block orders (runtime/order.py): the model's choices on the CPU, every order on the GPU."""
import itertools

import numpy as np
import pytest

import kfuse
from kfuse.errors import KfuseError
from kfuse.runtime.order import _Touches, band_bit, choose_orders, forced_orders, reuse_bytes

from conftest import EXAMPLES

H100_SMS, CAPACITY = 132, 25e6
ROOT = EXAMPLES[0].parent


def model_orders(prog, size):
    dims = {d.id: size for d in prog.program.dims}
    ks = prog.kernels
    resident = [H100_SMS * (2048 // k.launch.threads) for k in ks]
    iters = [k.launch.iterations(dims, 2 * r) for k, r in zip(ks, resident)]
    return choose_orders(ks, dims, iters, resident, 4, CAPACITY)


@pytest.mark.parametrize("name, expected", [("gemver", [0, 3]), ("atax", [2, 1]), ("sgemvt", [0, 3])])
def test_consumer_starts_where_the_producer_ended(name, expected):
    # the matrix kernel after another walks its blocks backward, in row bands (bit 1 where its
    # loop walks j, the rows' contiguous axis): the orders measured fastest on the H100
    # on the model's best plan of square (32 x 32) tiles, the plans the orders were measured on
    base = kfuse.compile(ROOT / f"{name}.kf")
    plan = next(p for p in base.search.plans()
                if all(kc.variant.tile is None for k in p.kernels for kc in k.calls))
    prog = base.with_plan(plan)
    assert len(prog.kernels) == 2
    assert model_orders(prog, 8192) == expected
    assert [band_bit(k) for k in prog.kernels] == [o & 2 for o in expected]
    assert all((o & 2) == (2 if k.launch.loop == "j" else 0) for o, k in zip(expected, prog.kernels))


@pytest.mark.parametrize("name", ["bicgk", "sgemv", "vadd", "axpydot"])
def test_single_kernel_walks_forward(name):
    prog = kfuse.compile(ROOT / f"{name}.kf")
    assert len(prog.kernels) == 1
    assert model_orders(prog, 8192 if name in ("bicgk", "sgemv") else 2**26) == [band_bit(prog.kernels[0])]


def test_unfused_vector_kernels_walk_back_and_forth():
    # WAXPBY without fusion: w1 = a x, w2 = b y + w1 ... each kernel reads what the one before wrote
    prog = kfuse.compile(ROOT / "waxpby.kf", fuse=False)
    assert len(prog.kernels) >= 2
    orders = model_orders(prog, 2**24)
    assert orders[0] == 0 and orders[1] == 1, orders


def test_no_shared_array_keeps_forward():
    prog = kfuse.compile("""
vector x[n], y[n], u[n], v[n];
input x, y;
u = scal(2, x);
v = scal(3, y);
return u, v;
""", fuse=False)
    assert len(prog.kernels) == 2
    assert model_orders(prog, 2**24) == [0, 0]


@pytest.mark.parametrize("name, fuse, size", [("waxpby", False, 2**24), ("gemver", True, 16384),
                                             ("atax", True, 32768), ("sgemvt", False, 16384)])
def test_regions_of_many_instances_choose_as_single_instances(name, fuse, size, monkeypatch):
    """Beyond SAMPLES instances, runs of instances are one region of the cache model (at the first
    launch of a 2^26 vector the per-instance model took seconds): the orders stay those of the
    per-instance model."""
    from kfuse.runtime import order
    # ATAX planned where its rows fit no block and no cluster (two kernels; at 8192 it runs in one pass)
    prog = kfuse.compile(ROOT / f"{name}.kf", fuse=fuse, sizes={"n": 140000} if name == "atax" else None)
    assert len(prog.kernels) >= 2
    assert order._strides(prog.kernels[0].launch.counts({d.id: size for d in prog.program.dims}))[0] >= 2
    sampled = model_orders(prog, size)
    monkeypatch.setattr(order, "SAMPLES", 1 << 40)
    assert model_orders(prog, size) == sampled


def test_reuse_bytes_lru():
    keys = np.arange(10, dtype=np.int64)
    ones = np.ones(10)
    producer = _Touches(keys, np.arange(10.0), ones)            # region 9 touched last
    backward = _Touches(keys, -np.arange(10.0), ones)           # starts at region 9
    forward = _Touches(keys, np.arange(10.0), ones)
    assert reuse_bytes(producer, backward, capacity=4) == 2     # 9 (depth 1, 0 before), 8 (2 + 1)
    assert reuse_bytes(producer, forward, capacity=4) == 0      # evicted before it gets there
    assert reuse_bytes(producer, backward, capacity=100) == 10


def test_forced_orders(monkeypatch):
    monkeypatch.setenv("KFUSE_ORDER", "1,3")
    assert forced_orders(2) == [1, 3]
    with pytest.raises(KfuseError, match="give 3 order"):
        forced_orders(3)
    monkeypatch.setenv("KFUSE_ORDER", "0,4")
    with pytest.raises(KfuseError, match="each 0 to 3"):
        forced_orders(2)


def test_generated_kernels_take_the_order(nvcc, tmp_path):
    """The order is compiled in: a macro per kernel, 0 unless the module is built for another;
    every order (bits 0-3) builds with nvcc for sm_90."""
    from kfuse.runtime.order import order_defines

    from test_nvcc import nvcc_compile
    prog = kfuse.compile(ROOT / "gemver.kf")
    for k in prog.kernels:
        name = k.launch.kernel
        assert f"#ifndef KF_ORDER_{name}\n#define KF_ORDER_{name} 0\n#endif" in k.source
        assert f"constexpr int order = KF_ORDER_{name};" in k.source
        assert "const int kf_rev = (order & 1) ^ ((order & 8) ? kf_flip : 0);" in k.source
        assert "kf_rev ? (long long)(gridDim.x - 1 - blockIdx.x)" in k.source
        assert k.source.count("int kf_flip") == 1
        assert "(order & 2) ? kf_b % kf_groups" in k.source
        assert "if (order & 4) kf_allow_next();" in k.source
    defines = order_defines(prog.kernels, (15, 11))
    assert defines == "#define KF_ORDER_k0_ger_ger_gemtv 15\n#define KF_ORDER_k1_gemv 11\n"
    assert order_defines(prog.kernels, (15, 0), defines) == ""       # already in the source
    nvcc_compile(nvcc, defines + prog.cuda_source, tmp_path, "orders")


def test_the_legacy_stream_replays_without_asking_the_driver(monkeypatch):
    """A call on the legacy default stream (where plain CuPy code launches) replays its graph
    without asking the driver whether the stream is being captured: it cannot be.  Another stream
    is asked every time (here: a driver that refuses every call)."""
    from kfuse.runtime import driver, executor

    class NoDriver:
        def __getattr__(self, name):
            raise AssertionError(f"driver called: {name}")
    monkeypatch.setattr(driver, "libcuda", lambda: NoDriver())
    assert driver.is_capturing(0) is False and driver.is_capturing(1) is False
    with pytest.raises(AssertionError, match="cuStreamIsCapturing"):
        driver.is_capturing(7)
    ex = executor.Executor.__new__(executor.Executor)
    b = _Binding(2, 0)
    key = (0, 0, 11, 12, 13, 0)
    b.graphs.execs[key] = type("G", (), {"launch": lambda g, s: b.launched.append(["graph", s])})()
    ex._launch(b, 0, [11, 12], [13], 0, 0, [])
    assert b.launched == [["graph", 0]]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, fuse", [("gemver", True), ("atax", True), ("sgemvt", True), ("gesummv", True),
                                        ("waxpby", False)])
def test_every_order_matches_reference(name, fuse, dtype, monkeypatch):
    import cupy as cp

    from kfuse.reference import device_case, evaluate, relative_error
    prog = kfuse.compile(ROOT / f"{name}.kf", dtype=dtype, fuse=fuse)
    p = prog.program
    size = 135 if any(v.type == "matrix" for v in p.values) else 4099
    sizes = iter([size, size + 65])          # rows and columns differ (not multiples of 32)
    dims = {d.id: next(sizes, size) for d in p.dims}
    prog = prog.for_sizes(dims)              # the plan these sizes get (their size class's)
    choices = [(0, 1, 2, 3) if k.launch.nesting == 2 else (0, 1) for k in prog.kernels]
    for combo in itertools.product(*choices):
        monkeypatch.setenv("KFUSE_ORDER", ",".join(map(str, combo)))
        dev, host, poisoned = device_case(p, dims, dtype, sum(combo))
        got = prog(out=poisoned, sync=True, **dev)
        got = got if isinstance(got, tuple) else (got,)
        ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
        for v, g in zip(p.outputs, got):
            err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
            assert err < (1e-5 if dtype == "float32" else 1e-12), (combo, v.name, err)


@pytest.mark.parametrize("n, expect", [(4096, True), (8192, True), (16384, False)])
def test_programs_alternate_where_their_arrays_are_a_few_l2s(monkeypatch, n, expect):
    """Bit 3 (calls alternating the mirrored order) where the arrays take at most
    ALTERNATE_SPAN x the L2: a float32 gemv at n = 8192 (256 MB, 5 x a 50 MB L2) alternates, at
    16384 (1 GB) not; KFUSE_ALTERNATE=0 turns it off."""
    from kfuse.runtime.order import alternates
    prog = kfuse.compile("matrix A; vector x, y; input A, x; y = gemv(A, x); return y;", calibration=False)
    dims = {d.id: n for d in prog.program.dims}
    assert alternates(prog.artifact, dims, 50 << 20) is expect
    monkeypatch.setenv("KFUSE_ALTERNATE", "0")
    assert not alternates(prog.artifact, dims, 50 << 20)


class _Binding:
    """What Executor._launch uses of a binding, recording each launch's flip and graph key."""
    from kfuse.runtime.binding import Binding
    set_flip = Binding.set_flip

    def __init__(self, launch_count: int, alternate: int):
        import ctypes

        from kfuse.runtime.executor import Graphs
        self.launch_count, self.alternate, self.parity, self.flip = launch_count, alternate, 1, 0
        self.flips = [ctypes.c_int(0), ctypes.c_int(0)]
        self.graphs, self.launched, self.device = Graphs(), [], 0

    def patch(self, *args):
        pass

    def launch_all(self, stream):
        self.launched.append([v.value for v in self.flips])


@pytest.mark.parametrize("launch_count", [1, 3])
@pytest.mark.parametrize("alternate", [1, 0])
def test_calls_alternate_the_mirrored_order(monkeypatch, launch_count, alternate):
    """Every other call sets kf_flip in every kernel (the first call keeps the chosen orders);
    captured graphs are kept per flip, so a replay runs the order of its call's parity;
    KFUSE_ALTERNATE=0 (alternate 0) never flips."""
    from kfuse.runtime import driver, executor
    captured = []

    def capture(self, key, binding, stream, capture_stream):
        captured.append(key)
        binding.launch_all(stream)
        self.execs[key] = type("G", (), {"launch": lambda g, s: binding.launched.append(["graph", key[1]])})()
        return True
    monkeypatch.setattr(executor.Graphs, "capture", capture)
    monkeypatch.setattr(driver, "is_capturing", lambda stream: False)
    ex = executor.Executor.__new__(executor.Executor)
    ex._capture = {0: 99}
    b = _Binding(launch_count, alternate)
    for _ in range(6):
        ex._launch(b, 7, [11, 12], [13], 0, 0, [])
    if not alternate:
        assert b.launched[:2] == [[0, 0], [0, 0]] and all(x[-1] == 0 for x in b.launched)
    elif launch_count == 1:                      # one launch: no graph, flipped in place
        assert b.launched == [[0, 0], [1, 1]] * 3
    else:                                        # seen, captured (one graph per flip), replayed
        assert b.launched == [[0, 0], [1, 1], [0, 0], [1, 1], ["graph", 0], ["graph", 1]]
        assert [k[1] for k in captured] == [0, 1]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["bicgk", "atax", "gemver", "waxpby"])
def test_consecutive_calls_alternate_and_stay_right(name, dtype):
    """A bound call made again and again (the same arrays: graphs replay from the third call on)
    alternates the mirrored block order and is right every time."""
    import cupy as cp

    from kfuse.reference import device_case, evaluate, relative_error
    prog = kfuse.compile(ROOT / f"{name}.kf", dtype=dtype)
    p = prog.program
    size = 1000 if any(v.type == "matrix" for v in p.values) else 4099
    sizes = iter([size, size + 65])
    dims = {d.id: next(sizes, size) for d in p.dims}
    prog = prog.for_sizes(dims)
    dev, host, poisoned = device_case(p, dims, dtype, 5)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    bound = prog.bind(out=poisoned, **dev)
    for call in range(5):
        for a in poisoned.values():
            a.fill(cp.nan)
        got = bound(sync=True)
        got = got if isinstance(got, tuple) else (got,)
        assert bound.binding.parity == call % 2 and bound.binding.alternate == 1
        for v, g in zip(p.outputs, got):
            err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
            assert err < (1e-5 if dtype == "float32" else 1e-12), (call, v.name, err)


@pytest.mark.gpu
def test_launch_orders_on_the_gpu():
    """Bit 2 (let the next kernel launch early) only on a kernel of at most two waves whose next
    kernel waits for it; none on the last kernel, none without PDL."""
    import cupy as cp

    from kfuse.runtime.launch import pdl_available
    from kfuse.runtime.order import ALLOW_NEXT, launch_orders
    dev = cp.cuda.Device().id
    prog = kfuse.compile(ROOT / "gemver.kf")
    dims = {d.id: 8192 for d in prog.program.dims}
    orders = launch_orders(prog.artifact, dims, dev, pdl=True)
    plain = launch_orders(prog.artifact, dims, dev, pdl=False)
    assert not any(o & ALLOW_NEXT for o in plain)
    assert tuple(o & ~ALLOW_NEXT for o in orders) == plain      # bit 2 changes nothing else
    assert orders[0] & ALLOW_NEXT and not orders[1] & ALLOW_NEXT
    assert plain[0] & 1 == 0 and plain[1] & 2                   # the first walks forward; w = a B x in row bands
    many = kfuse.compile(ROOT / "waxpby.kf", fuse=False)
    dims = {d.id: 2**24 for d in many.program.dims}
    assert not any(o & ALLOW_NEXT for o in launch_orders(many.artifact, dims, dev, pdl=pdl_available(dev)))
