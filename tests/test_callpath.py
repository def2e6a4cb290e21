"""The call path on the CPU: the signature cache re-binds (and re-checks) exactly when the
arguments' shape, dtype, strides, device or given outputs change, a wrong argument raises before
anything is launched, and script inputs named like the call's keywords are refused at compile
time.  CuPy is replaced by a stand-in with host "device pointers"; nothing is compiled."""
import sys
import types

import numpy as np
import pytest

import kfuse
from kfuse.errors import LaunchError, ScriptError

BICGK = "matrix A; vector p, q, r, s; input A, p, r; q = gemv(A, p); s = gemtv(A, r); return q, s;"
SCAL = "scalar a; vector x, y; input a, x; y = scal(a, x); return y;"


class FakeArray:
    """What the call path reads of a CuPy array: shape, dtype, strides, data.ptr, data.device_id."""
    _next = [1 << 20]

    def __init__(self, shape, dtype="float32", device=0, strides=None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        itemsize, st = self.dtype.itemsize, []
        for n in reversed(self.shape):
            st.insert(0, itemsize)
            itemsize *= n
        self.strides = tuple(strides or st)
        self.ndim, self.size = len(self.shape), int(np.prod(self.shape))
        self.nbytes = self.size * self.dtype.itemsize
        ptr = self._next[0]
        self._next[0] += -(-max(self.nbytes, 1) // 256) * 256 + 256
        self.data = types.SimpleNamespace(ptr=ptr, device_id=device)
        self.device = types.SimpleNamespace(id=device)


@pytest.fixture
def fake(monkeypatch):
    """A CuPy stand-in, and the GPU steps of a binding and a launch replaced by records."""
    cp = types.ModuleType("cupy")
    cp.ndarray = FakeArray

    class MemoryPointer(int):
        def __add__(self, off):
            return MemoryPointer(int(self) + off)

        @property
        def ptr(self):
            return int(self)
    cp.cuda = types.SimpleNamespace(
        MemoryPointer=MemoryPointer, alloc=lambda n: MemoryPointer(FakeArray((max(n, 1),), "uint8").data.ptr),
        runtime=types.SimpleNamespace(getDevice=lambda: 0),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    from kfuse.runtime import binding, executor
    built, launched = [], []

    def prepare(self):
        built.append(self)
        self.launches, self.patches, self.kernel_launches, self.fills_before = [], [], [], []

    monkeypatch.setattr(binding.Binding, "_prepare", prepare)
    monkeypatch.setattr(kfuse.CompiledScript, "for_sizes", lambda self, dims: self)   # tested below
    monkeypatch.setattr(executor.Executor, "_launch", lambda self, b, s, i, o, own, tmp, sc: launched.append(
        (b, list(i), list(o), sc)))
    monkeypatch.setattr(executor.Executor, "_result", lambda self, b, block, out: tuple(
        out[n] if off is None else ("view", off, shape) for n, off, shape, _ in b.result_layout))
    return types.SimpleNamespace(built=built, launched=launched)


def test_same_signature_binds_once_new_pointers_launch(fake):
    prog = kfuse.compile(BICGK, calibration=False)
    A, p, r = FakeArray((40, 50)), FakeArray((50,)), FakeArray((40,))
    prog(A=A, p=p, r=r)
    prog(A=A, p=p, r=r)
    A2, p2, r2 = FakeArray((40, 50)), FakeArray((50,)), FakeArray((40,))
    prog(A=A2, p=p2, r=r2)
    assert len(fake.built) == 1
    assert [f[1] for f in fake.launched] == [[A.data.ptr, p.data.ptr, r.data.ptr]] * 2 + [
        [A2.data.ptr, p2.data.ptr, r2.data.ptr]]


@pytest.mark.parametrize("change", ["shape", "dtype", "strides", "device", "out"])
def test_a_changed_signature_binds_again(fake, change):
    prog = kfuse.compile(BICGK, calibration=False)
    args = {"A": FakeArray((40, 50)), "p": FakeArray((50,)), "r": FakeArray((40,))}
    prog(**args)
    out = None
    if change == "shape":
        args = {"A": FakeArray((41, 50)), "p": FakeArray((50,)), "r": FakeArray((41,))}
    elif change == "out":
        out = {"q": FakeArray((40,))}
    else:
        kw = {"dtype": "float64"} if change == "dtype" else {"device": 1} if change == "device" else {
            "strides": (400, 4)}
        args["A"] = FakeArray((40, 50), **kw) if change != "strides" else FakeArray((40, 50), strides=(400, 4))
    expect = {"dtype": "A: dtype is float64", "device": "p is on GPU 0 but A is on GPU 1",
              "strides": "A: array is not C-contiguous"}
    if change in expect:                       # re-checked: the new signature's error, nothing launched
        with pytest.raises(LaunchError, match=expect[change]):
            prog(**args, out=out)
        assert len(fake.launched) == 1 and len(fake.built) == 1
    else:
        prog(**args, out=out)
        assert len(fake.built) == 2 and len(fake.launched) == 2
        if change == "out":
            assert fake.launched[-1][2] == [out["q"].data.ptr]


def test_wrong_arguments_raise_before_launch_after_good_calls(fake):
    prog = kfuse.compile(BICGK, calibration=False)
    A, p, r = FakeArray((40, 50)), FakeArray((50,)), FakeArray((40,))
    for _ in range(3):
        prog(A=A, p=p, r=r)
    cases = [({"A": A, "p": FakeArray((49,)), "r": r}, "p: length is 49, but A has columns 50"),
             ({"A": A, "p": p}, "missing input"),
             ({"A": A, "p": p, "r": r, "zz": 1.0}, "unknown input"),
             ({"A": A, "p": np.ones(50, np.float32), "r": r}, "NumPy array lives in host memory"),
             ({"A": A, "p": p, "r": "r"}, "r: expected a CuPy array")]
    for args, match in cases:
        with pytest.raises(LaunchError, match=match):
            prog(**args)
    with pytest.raises(LaunchError, match="share memory"):
        prog(A=A, p=p, r=r, out={"q": r})
    with pytest.raises(LaunchError, match="not a returned value"):
        prog(A=A, p=p, r=r, out={"A": FakeArray((40,))})
    assert len(fake.launched) == 3


def test_scalars_are_read_each_call(fake):
    prog = kfuse.compile(SCAL, calibration=False)
    x = FakeArray((100,))
    prog(a=2.0, x=x)
    prog(a=3, x=x)
    with pytest.raises(LaunchError, match="a: expected a real number"):
        prog(a="2", x=x)
    assert [f[3] for f in fake.launched] == [[2.0], [3]] and len(fake.built) == 1


@pytest.mark.parametrize("name", ["out", "sync", "stream"])
def test_input_named_like_a_call_keyword_is_refused(name):
    src = f"scalar a; vector {name}, y; input a, {name};\ny = scal(a, {name}); return y;"
    with pytest.raises(ScriptError, match=f"the input '{name}' has the name of a keyword") as e:
        kfuse.compile(src, calibration=False)
    assert e.value.line == 1 and e.value.column == src.index(name, src.index("input")) + 1


def test_short_repr():
    prog = kfuse.compile(BICGK, calibration=False)
    assert repr(prog) == "<kfuse.CompiledScript <script> (float32): 2 call(s) in 1 kernel(s)>" or len(repr(prog)) < 120


def test_a_call_of_another_size_class_gets_its_own_plan():
    """Sizes of another class than the one planned for: a plan ranked for that class, made once;
    the same class (or an unfused program) keeps the program's own plan."""
    prog = kfuse.compile(BICGK, calibration=False, tuned=False)
    small = {d.id: 1000 for d in prog.program.dims}
    same = {d.id: prog.search.dims[d.id] - 7 for d in prog.program.dims}
    other = prog.for_sizes(small)
    assert other is not prog and other.search.dims == small and prog.for_sizes(small) is other
    assert other.program is prog.program and other.kernels
    assert prog.for_sizes(same) is prog
    unfused = kfuse.compile(BICGK, calibration=False, fuse=False)
    assert unfused.for_sizes(small) is unfused


def test_the_executor_runs_what_resolve_hands_it(fake):
    """The runtime's one question to the compiler: the executor asks its ``resolve`` once per
    argument signature, with the sizes and the scalars passed on the device, and binds the
    artifact it gets (here another program's: a call of another size class), building nothing
    for the compile-time plan."""
    from kfuse.runtime.executor import Executor
    prog, other = kfuse.compile(SCAL, calibration=False), kfuse.compile(SCAL, calibration=False, fuse=False)
    asked = []

    def resolve(sizes, device_scalars):
        asked.append((dict(sizes), device_scalars))
        return other.for_device_scalars(device_scalars).artifact
    ex = Executor(prog.program, prog.dtype, resolve)
    x = FakeArray((100,))
    ex.call({"a": 2.0, "x": x}, None, False, None)
    ex.call({"a": 3.0, "x": x}, None, False, None)
    assert asked == [({0: 100}, frozenset())]
    assert [b.artifact for b in fake.built] == [other.artifact]
    ex.call({"a": FakeArray(()), "x": x}, None, False, None)     # a device scalar: a new signature
    assert asked[-1] == ({0: 100}, frozenset({"a"})) and len(fake.built) == 2
    assert fake.built[-1].artifact.program.device_scalars() == {"a"}


def test_compiled_script_and_artifact_are_immutable_and_a_shared_source_makes_new_ones():
    import dataclasses
    prog = kfuse.compile(BICGK, calibration=False)
    art = prog.artifact
    assert prog.artifact is art and art.kernels == tuple(prog.kernels) and art.source == prog.cuda_source
    with pytest.raises(dataclasses.FrozenInstanceError):
        art.dtype = "float64"
    assert prog.calls.resolve_artifact({d.id: prog.search.dims[d.id] for d in prog.program.dims}, frozenset()) is art
    with pytest.raises(dataclasses.FrozenInstanceError):
        prog.plan = None
    other = prog.share_source("// shared\n" + prog.cuda_source)      # a new compiled script; prog is unchanged
    shared = other.artifact
    assert other is not prog and prog.artifact is art and prog.cuda_source == art.own_source
    assert shared is not art and shared.shared.startswith("// shared") and shared.own_source == art.own_source
    assert other.cuda_source.startswith("// shared") and other.plan is prog.plan and other.session is prog.session
    assert "kf_persistent" in art.persistent_source("__global__ void kf_persistent() {}")


def test_torch_results_are_one_as_strided_of_a_typed_block_each(monkeypatch):
    """With torch tensors a call's own results come from one block of the element type, each one
    ``as_strided`` of it (one torch operation a result, where a byte slice viewed twice took
    three); given outputs are returned as given."""
    import types as _types
    from kfuse.runtime import executor

    class MemoryPointer:                 # not the block's type: the torch branch
        pass
    monkeypatch.setattr(executor, "cupy", lambda: _types.SimpleNamespace(cuda=_types.SimpleNamespace(MemoryPointer=MemoryPointer)))
    calls = []

    class Block:
        def as_strided(self, shape, strides, offset):
            calls.append((shape, strides, offset))
            return ("view", shape, strides, offset)
    binding = _types.SimpleNamespace(dtype=np.dtype("float64"), torch_layout=None,
                                     result_layout=[("y", 512, (3, 4), 96), ("s", 1024, (), 8), ("z", None, (5,), 40),
                                                    ("g", 2048, (2, 3, 4), 192)])
    got = executor.Executor._result(None, binding, Block(), {"z": "given"})
    assert got == (("view", (3, 4), (4, 1), 64), ("view", (), (), 128), "given", ("view", (2, 3, 4), (12, 4, 1), 256))
    assert len(calls) == 3
    again = executor.Executor._result(None, binding, Block(), {"z": "given"})
    assert again == got and binding.torch_layout is not None      # the layout made once


def test_a_kept_block_is_reused_only_when_nothing_holds_its_results(monkeypatch):
    """``executor._unused``: a CuPy block is free when no result has a name besides the kept list;
    a torch block also needs no result held from C++ (a DLPack capsule: the tensor's use count) and
    no view of a result (the storage's use count as it was when the results were made).  torch is
    a stand-in here: the rule, not torch, is under test."""
    from kfuse.runtime import executor

    class Tensor:
        def __init__(self):
            self.uses = 1

        def _use_count(self):
            return self.uses
    storage = {"count": 5}
    fake_torch = types.SimpleNamespace(_C=types.SimpleNamespace(_storage_Use_Count=lambda h: storage["count"]))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    cupy_like = [object(), object()]
    torch_like = [Tensor(), Tensor()]
    recycled = [(7, "cupy block", cupy_like, 100, None), (7, "torch block", torch_like, 200, (42, 5))]
    held = cupy_like[0]
    assert executor._unused(recycled, 8) is None                    # another stream
    got = executor._unused(recycled, 7)
    assert got is recycled[1]                                       # the CuPy results are held
    del held
    assert executor._unused(recycled, 7) is recycled[0]
    recycled.pop(0)
    storage["count"] = 6                                            # a view of a torch result
    assert executor._unused(recycled, 7) is None
    storage["count"] = 5
    torch_like[1].uses = 2                                          # a capsule holds a result
    assert executor._unused(recycled, 7) is None
    torch_like[1].uses = 1
    name = torch_like[0]                                            # a name holds a result
    assert executor._unused(recycled, 7) is None
    del name
    assert executor._unused(recycled, 7) is recycled[0]
