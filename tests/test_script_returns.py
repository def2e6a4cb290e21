"""Scripts that return scalar arithmetic (``return sqrt(rr), rr / bb;``), on the CPU: what the
parser makes of the return statement (the returned items, the computed scalars the arithmetic
reads joining the outputs, the plan unchanged), the errors at their line and column, the
``kf_scalars`` module built with nvcc (operands by address, a number by value, shared operations
computed once), ``describe`` and ``kfuse plan``, the float64 reference of the returns, and the
call path with CuPy replaced by a stand-in (what the small kernel reads and writes, and what a
call, ``calls.outputs`` and ``bind`` give back)."""
import subprocess
import sys
import types

import numpy as np
import pytest

import kfuse
from kfuse.errors import ScriptError
from kfuse.frontend import parse_script
from kfuse.ir.program import ScalarArg, Value
from kfuse.reference import evaluate, returned
from kfuse.codegen.loop.scalars import ScalarCode
from kfuse.runtime.control import ScalarTail

from test_callpath import FakeArray, fake  # noqa: F401 - the stand-in fixture

NORMS = """vector r, b;
scalar rr, bb, tol, ratio;
input r, b, tol;
rr = dot(r, r);
bb = dot(b, b);
ratio = rr / bb;
return sqrt(rr), ratio, rr, sqrt(ratio) - tol;
"""
PLAIN = NORMS.replace("return sqrt(rr), ratio, rr, sqrt(ratio) - tol;", "return rr, bb;")
CG = """matrix A;
vector x, r, p, q;
scalar rr, pq, rr_new, alpha;
input A, x, r, p, rr;
q = gemv(A, p);
pq = dot(p, q);
alpha = rr / pq;
x = axpy(alpha, p, x);
r = axpy(-alpha, q, r);
rr_new = dot(r, r);
return x, r, rr_new / rr, sqrt(rr_new);
"""


def test_returned_items_and_the_outputs_they_read(lib):
    prog = parse_script(NORMS, lib)
    assert [v.name for v in prog.outputs] == ["rr", "bb"]       # read by the arithmetic: outputs
    items = prog.returned
    assert [type(r) for r in items] == [ScalarArg, ScalarArg, Value, ScalarArg]
    assert [r.text() if isinstance(r, ScalarArg) else r.name for r in items] == [
        "sqrt(rr)", "rr / bb", "rr", "sqrt(rr / bb) - tol"]
    assert items[2] is prog.outputs[0]
    assert [a.text() for a in prog.returned_arithmetic()] == ["sqrt(rr)", "rr / bb", "sqrt(rr / bb) - tol"]
    # the arithmetic reads the program's own values (the input tol among them)
    tol = next(v for v in prog.inputs if v.name == "tol")
    assert prog.returned_arithmetic()[2].values() == (prog.outputs[0], prog.outputs[1], tol)
    # operands shared in the script stay shared across the returned items
    assert prog.returns[3].operands[0].operands[0] is prog.returns[1]
    # a script that returns names only is the program it always was
    plain = parse_script(PLAIN, lib)
    assert plain.returns == () and plain.returned == plain.outputs and plain.returned_arithmetic() == ()


def test_forms_of_returned_arithmetic(lib):
    head = "vector r, y; scalar rr, a, s; input r, a;\nrr = dot(r, r);\ny = scal(a, r);\n"
    for ret, texts, outs in [("return sqrt(rr);", ["sqrt(rr)"], ["rr"]),
                             ("return -rr, y;", ["-rr", "y"], ["rr", "y"]),
                             ("return y, (rr + 1) * a / 2;", ["y", "(rr + 1.0) * a / 2.0"], ["y", "rr"]),
                             ("return rr, sqrt(rr), rr * rr;", ["rr", "sqrt(rr)", "rr * rr"], ["rr"]),
                             ("s = sqrt(rr) * a;\nreturn s, y;", ["sqrt(rr) * a", "y"], ["rr", "y"]),
                             ("return y, 2 * a;", ["y", "2.0 * a"], ["y"])]:
        prog = parse_script(head + ret, lib)
        assert [r.text() if isinstance(r, ScalarArg) else r.name for r in prog.returned] == texts, ret
        assert [v.name for v in prog.outputs] == outs, ret


def test_the_plan_is_the_plan_of_the_scalars_returned():
    arith = kfuse.compile(NORMS, calibration=False)
    plain = kfuse.compile(PLAIN, calibration=False)
    assert arith.plan.describe() == plain.plan.describe()
    assert [k.source for k in arith.kernels] == [k.source for k in plain.kernels]


BAD = [  # name, return statement, line, column, message
    ("vector", "return -q;", 5, 9, "q is a vector; scalar arithmetic takes scalars"),
    ("vector-sum", "return rr + q;", 5, 13, "q is a vector; scalar arithmetic takes scalars"),
    ("matrix", "return sqrt(A);", 5, 13, "A is a matrix; scalar arithmetic takes scalars"),
    ("unassigned", "return sqrt(t);", 5, 13, "t is used before it is assigned"),
    ("undeclared", "return rr / zz;", 5, 13, "zz is not declared"),
    ("division-by-zero", "return rr / 0;", 5, 13, "division by zero"),
    ("inputs-only", "return 2 * a;", 5, 1, "the script returns nothing its calls compute"),
    ("number-only", "return 1.5;", 5, 1, "the script returns nothing its calls compute"),
    ("empty-item", "return rr, ;", 5, 12, "expected a value to return, found ';'"),
    ("missing-comma", "return rr sqrt(rr);", 5, 11, "expected ';', found 'sqrt'"),
    ("keyword", "return input;", 5, 8, "expected a value to return, found 'input'"),
    ("call", "return dot(x, x);", 5, 8, "assign the call to a name first and return the name"),
    ("input", "return a, sqrt(rr);", 5, 8, "a is an input; return values the script computes"),
    ("twice", "return rr, sqrt(rr), rr;", 5, 22, "rr is returned twice"),
    ("two-values-of-a-name", "t = sqrt(rr);\nrr = dot(q, q);\nreturn t, rr;", 7, 11,
     "the returned values read two values named rr: the one assigned on line 3 and the one assigned on line 6"),
]


@pytest.mark.parametrize("name, ret, line, col, message", BAD, ids=[b[0] for b in BAD])
def test_unsupported_returns_are_refused_at_their_place(lib, name, ret, line, col, message):
    src = "matrix A; vector x, q; scalar a, rr, t;\ninput A, x, a;\nrr = dot(x, x);\nq = gemv(A, x);\n" + ret + "\n"
    with pytest.raises(ScriptError) as e:
        parse_script(src, lib)
    assert (e.value.line, e.value.column) == (line, col), str(e.value)
    assert message in str(e.value)


def test_describe_and_kfuse_plan_name_the_returned_arithmetic(tmp_path, capsys):
    prog = kfuse.compile(NORMS, calibration=False)
    last = prog.describe().splitlines()[-1]
    assert last == ("  returned arithmetic: sqrt(rr), rr / bb, sqrt(rr / bb) - tol "
                    "(one kf_scalars launch after the plan)")
    assert "returned arithmetic" not in kfuse.compile(PLAIN, calibration=False).describe()
    path = tmp_path / "norms.kf"
    path.write_text(NORMS)
    from kfuse.cli.main import main
    assert main(["plan", str(path), "--size", "1000"]) == 0
    assert last in capsys.readouterr().out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scalar_kernel_builds_with_nvcc(dtype, nvcc, tmp_path):
    prog = kfuse.compile(NORMS, dtype=dtype, calibration=False)
    tail = prog.calls.scalar_tail
    assert tail.reads == [("out", 0), ("out", 1), ("in", "tol")]
    src = prog.calls.scalars_source
    real = {"float32": "float", "float64": "double"}[dtype]
    assert f"typedef {real} real;" in src
    assert ('extern "C" __global__ void kf_scalars(real* __restrict__ o0, real* __restrict__ o1, '
            "real* __restrict__ o2, const real* __restrict__ p0, const real* __restrict__ p1, "
            "const real* __restrict__ p2) {") in src
    body = src.split("kf_scalars(", 1)[1].split("}", 1)[0]
    assert "const real t0 = ((*p0) / (*p1));" in body            # rr / bb once, for two results
    assert "*o1 = (real)(t0);" in body and "*o2 = (real)((sqrt(t0) - (*p2)));" in body
    by_value = tail.source((False, False, True))                 # tol given as a Python number
    assert ", real v2) {" in by_value and "(sqrt(t0) - v2)" in by_value
    chain = "vector x; scalar s0, " + ", ".join(f"s{k}" for k in range(1, 61)) + "; input x;\ns0 = dot(x, x);\n"
    chain += "".join(f"s{k} = s{k - 1} * s{k - 1};\n" for k in range(1, 61)) + "return s60, s0;\n"
    long_src = kfuse.compile(chain, dtype=dtype, calibration=False).calls.scalars_source
    assert long_src.count("const real t") == 59 and len(long_src) < 10_000     # linear, not 2^60
    cg = kfuse.compile(CG, dtype=dtype, calibration=False).calls.scalars_source
    for k, text in enumerate([src, by_value, long_src, cg]):
        cu = tmp_path / f"scalars{k}.cu"
        cu.write_text(text)
        done = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", str(tmp_path / f"scalars{k}.cubin"), str(cu)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_scripts_without_returned_arithmetic_have_no_scalar_kernel():
    prog = kfuse.compile(PLAIN, calibration=False)
    assert prog.calls.scalar_tail is None and prog.calls.scalars_source is None


def test_reference_of_the_returns(lib):
    prog = parse_script(NORMS, lib)
    r, b = np.arange(1.0, 6.0), np.array([1.0, -2.0, 0.5])
    env = evaluate(prog, {"r": r, "b": b, "tol": 0.25})
    rr, bb = r @ r, b @ b
    got = returned(prog, env)
    assert np.allclose(got, [np.sqrt(rr), rr / bb, rr, np.sqrt(rr / bb) - 0.25], rtol=1e-15)


def test_device_scalars_keep_the_returned_arithmetic():
    host = kfuse.compile(CG, calibration=False)
    dev = host.for_device_scalars(["rr"])
    assert [a.text() for a in dev.program.returned_arithmetic()] == ["rr_new / rr", "sqrt(rr_new)"]
    assert dev.program == host.program.with_device_scalars(["rr"])
    rr = next(v for v in dev.program.inputs if v.name == "rr")
    assert rr.on_device and dev.program.returned_arithmetic()[0].values()[1] is rr


# -- the call path, with CuPy replaced by a stand-in ---------------------------------------------
@pytest.fixture
def tail_launches(fake, monkeypatch):  # noqa: F811 - the stand-in fixture
    """The stand-in made to give results as arrays, the scalar module and its launches recorded."""
    from kfuse.runtime import control, executor, launch
    cp = sys.modules["cupy"]
    cp.empty = lambda shape, dtype: FakeArray(shape, dtype)

    class Device:
        def __init__(self, i=0):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False
    cp.cuda.Device = Device
    monkeypatch.setattr(executor.Executor, "_result", lambda self, b, block, out: (lambda r: r[0] if len(r) == 1
                        else tuple(r))([out[n] if off is None else FakeArray(shape, b.dtype)
                                        for n, off, shape, _ in b.result_layout]))
    sources, launched = [], []
    monkeypatch.setattr(control, "control_module", lambda source, relocatable: (sources.append(source), types.SimpleNamespace(
        get_function=lambda name: ("function", name)))[1])

    class Launch:
        def __init__(self, fn, grid, threads, args, name, dependent=False):
            self.record = (fn, grid, threads, args, name)

        def launch(self, stream):
            launched.append(self.record + (stream,))
    monkeypatch.setattr(launch, "KernelLaunch", Launch)
    monkeypatch.setattr(launch, "PackedArgs", lambda args: args)
    return types.SimpleNamespace(sources=sources, launched=launched, fake=fake)


def _within(monkeypatch, binding):
    """The arithmetic's launch a binding made (``Binding._returns_launch``, the stand-in's
    ``_prepare`` makes none): (function, grid, threads, name, [(source, index or offset) per
    argument, or the value of one not patched])."""
    from kfuse.runtime import binding as bmod

    class Packed:
        def __init__(self, args):
            self.values = [types.SimpleNamespace(value=a) for a in args]
    monkeypatch.setattr(bmod, "PackedArgs", Packed)
    monkeypatch.setattr(bmod, "KernelLaunch", lambda fn, grid, threads, args, name: (fn, grid, threads, name, args))
    (fn, grid, threads, name, packed), patches = binding._returns_launch()
    by_obj = {id(obj): (src, a) for obj, src, a in patches}
    return fn, grid, threads, name, [by_obj.get(id(v), v.value) for v in packed.values]


def test_a_call_returns_the_arithmetic_computed_after_the_kernels(tail_launches, monkeypatch):
    """A plain call: the binding launches the arithmetic after the kernels (in their graph), its
    results 0-d arrays of the call's block after the outputs; no launch of its own."""
    from kfuse.runtime.binding import OWN, SCALAR
    prog = kfuse.compile(NORMS, calibration=False)
    r, b = FakeArray((70,)), FakeArray((70,))
    got = prog(r=r, b=b, tol=0.5)
    assert len(got) == 4 and tail_launches.launched == []
    bnd, = tail_launches.fake.built
    assert [n for n, *_ in bnd.result_layout] == ["rr", "bb", "#0", "#1", "#2"]
    rr = got[2]
    assert isinstance(rr, FakeArray) and rr.shape == () and [a.shape for a in (got[0], got[1], got[3])] == [(), (), ()]
    fn, grid, threads, name, args = _within(monkeypatch, bnd)
    assert (fn, grid, threads, name) == (("function", "kf_scalars"), 1, 1, "kf_scalars")
    # the three results in the call's block, then rr and bb by address and tol by value
    item = 4
    at = bnd.returns_at
    assert at >= bnd.offsets[bnd.prog.outputs[1].id][1] + item
    assert args[:3] == [(OWN, at), (OWN, at + item), (OWN, at + 2 * item)]
    assert args[3:] == [bnd.offsets[bnd.prog.outputs[0].id], bnd.offsets[bnd.prog.outputs[1].id],
                        (SCALAR, bnd.scalar_inputs.index("tol"))]
    assert ", real v2) {" in tail_launches.sources[0]
    # the program's outputs without the arithmetic
    outs = prog.calls.outputs(r=r, b=b, tol=0.5)
    assert len(outs) == 2 and all(isinstance(o, FakeArray) and o.shape == () for o in outs)
    assert tail_launches.launched == []


def test_given_outputs_take_the_arithmetic_by_a_launch_of_its_own(tail_launches):
    prog = kfuse.compile(NORMS, calibration=False)
    r, b = FakeArray((70,)), FakeArray((70,))
    rr, bb = FakeArray(()), FakeArray(())
    got = prog(r=r, b=b, tol=0.5, out={"rr": rr, "bb": bb})
    assert len(got) == 4 and got[2] is rr
    (fn, grid, threads, args, name, stream), = tail_launches.launched
    assert (fn, grid, threads, name) == (("function", "kf_scalars"), 1, 1, "kf_scalars")
    # the three results, then rr and bb by address and tol by value
    assert args[:3] == tuple(x.data.ptr for x in (got[0], got[1], got[3]))
    assert args[3] == rr.data.ptr and args[4] == bb.data.ptr
    assert args[5] == np.float32(0.5) and isinstance(args[5], np.float32)
    assert tail_launches.fake.built[0].returns is None


def test_a_device_scalar_is_read_by_address(tail_launches, monkeypatch):
    from kfuse.runtime.binding import IN, SCALAR
    prog = kfuse.compile(CG, dtype="float64", calibration=False)
    A, x, r, p = FakeArray((50, 50), "float64"), FakeArray((50,), "float64"), FakeArray((50,), "float64"), \
        FakeArray((50,), "float64")
    rr = FakeArray((), "float64")
    got = prog(A=A, x=x, r=r, p=p, rr=rr)
    assert len(got) == 4 and got[0].shape == (50,) and got[1].shape == (50,) and got[2].shape == ()
    bnd = tail_launches.fake.built[-1]
    *_, args = _within(monkeypatch, bnd)
    # results o0, o1; then rr_new (an output), rr (the input, by address)
    assert args[3] == (IN, bnd.array_inputs.index("rr"))
    assert "real v1" not in tail_launches.sources[0]
    prog(A=A, x=x, r=r, p=p, rr=1.5)        # rr as a number: by value, another module
    bnd = tail_launches.fake.built[-1]
    *_, args = _within(monkeypatch, bnd)
    assert args[3] == (SCALAR, bnd.scalar_inputs.index("rr")) and ", real v1) {" in tail_launches.sources[1]
    assert len(tail_launches.fake.built) == 2 and tail_launches.launched == []
    prog(A=A, x=x, r=r, p=p, rr=2.5)        # the same binding again, the number patched
    assert len(tail_launches.fake.built) == 2 and tail_launches.fake.launched[-1][3] == [2.5]


def test_a_bound_call_writes_the_same_results(tail_launches):
    prog = kfuse.compile(NORMS, calibration=False)
    r, b = FakeArray((70,)), FakeArray((70,))
    bound = prog.bind(r=r, b=b, tol=0.5)
    assert tail_launches.fake.launched == []          # nothing launched before a call
    first = bound()
    again = bound()
    assert first is again and len(first) == 4 and first[2] is bound.outputs[0]
    assert len(bound.outputs) == 2 and len(tail_launches.fake.launched) == 2 and tail_launches.launched == []
    assert bound.launch_count == bound.bound.launch_count
    # with given outputs: the arithmetic's own launch after each call, into results made once
    rr, bb = FakeArray(()), FakeArray(())
    bound = prog.bind(r=r, b=b, tol=0.5, out={"rr": rr, "bb": bb})
    first, again = bound(), bound()
    assert first is again and first[2] is rr
    assert [x[3] for x in tail_launches.launched] == [tail_launches.launched[0][3]] * 2
    assert tail_launches.launched[0][3][:3] == tuple(x.data.ptr for x in (first[0], first[1], first[3]))


def test_a_single_returned_expression_is_not_a_tuple(tail_launches):
    prog = kfuse.compile("vector r; scalar rr; input r; rr = dot(r, r); return sqrt(rr);", calibration=False)
    got = prog(r=FakeArray((33,)))
    assert isinstance(got, FakeArray) and got.shape == ()


def test_jitted_tails_are_unchanged():
    """The jit's tail: every leaf by address, the module text as before for unshared trees."""
    tail = ScalarTail(ScalarCode("float32", (("+", ("/", ("leaf", 0), ("num", 2.0)), ("sqrt", ("leaf", 1))),),
                                 (("out", 0), ("arg", 1))))
    assert "*o0 = (real)((((*p0) / (real)2.0) + sqrt((*p1))));" in tail.source()
    assert tail.__call__(["host"], [1.0, 2.0]) is None       # host numbers: the framework computes those


def test_several_gpus_refuse_returned_arithmetic(lib):
    from kfuse.distributed.partition import partition
    with pytest.raises(kfuse.KfuseError, match=r"returns scalar arithmetic \(sqrt\(rr\)\); a script run over several"):
        partition(parse_script(NORMS, lib), lib, 2)


def test_the_tail_tells_device_arrays_by_type_without_the_array_interface(monkeypatch):
    """A torch tensor's __cuda_array_interface__ builds a dict on every read: the returned
    arithmetic's call (on every call of a fed-back loop) tells CuPy arrays and torch CUDA tensors
    by type and never reads it; a tensor on the host or a number is left to the framework."""
    from kfuse.runtime import args as runtime_args, control

    class Tensor:                               # a stand-in for torch.Tensor
        def __init__(self, cuda=True):
            self.is_cuda = cuda

        @property
        def __cuda_array_interface__(self):
            raise AssertionError("read on the hot path")

    class Array:                                # a stand-in for cupy.ndarray
        __cuda_array_interface__: dict = {}
    monkeypatch.setattr(runtime_args, "torch_tensor_type", lambda: Tensor)
    monkeypatch.setattr(control, "cupy", lambda: types.SimpleNamespace(ndarray=Array))
    tail = ScalarTail(ScalarCode("float32", (("sqrt", ("leaf", 0)),), (("out", 0), ("arg", 1))))
    ran = []
    monkeypatch.setattr(tail, "run", lambda like, sources: ran.append((like, sources)) or ["result"])
    t, u = Tensor(), Tensor()
    assert tail([t], [None, u]) == ["result"] and ran == [(t, [t, u])]
    a = Array()
    assert tail([a], [None, Array()]) == ["result"]
    assert tail([t], [None, Tensor(cuda=False)]) is None and tail([t], [None, 2.0]) is None
    assert len(ran) == 2
