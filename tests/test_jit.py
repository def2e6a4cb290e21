"""@kfuse.jit on the CPU: each operator form and library function traced onto the expected calls,
errors that name the user's line, the cache (hits, and misses on a new dtype, rank, scalar kind,
code or library; size classes planned below it), device scalars and scalar arithmetic through
the script front end, code generation, and nvcc builds of traced programs.  NumPy arrays stand
in for device arrays where only shapes and dtypes are read; the call path runs on the CuPy
stand-in of test_callpath (nothing is compiled or launched)."""
import inspect
import math

import numpy as np
import pytest

import kfuse
from kfuse.jit import decorator as jit_module
from kfuse.errors import KfuseError, ScriptError
from kfuse.frontend import parse_script
from kfuse.ir.program import ScalarArg
from kfuse.reference import evaluate

from test_callpath import FakeArray, fake  # noqa: F401 - the fixture
from test_library import make_library, scal_function
from test_nvcc import nvcc_compile

N, M = 33, 31
A = np.zeros((N, M), np.float32)
B = np.zeros((N, M), np.float32)
x, y, u = np.zeros(M, np.float32), np.zeros(M, np.float32), np.zeros(N, np.float32)
r = np.zeros(N, np.float32)


class Dev0:
    """A 0-d device array as tracing sees it (shape and dtype only)."""
    shape, ndim = (), 0

    def __init__(self, dtype="float32"):
        self.dtype = np.dtype(dtype)


def calls(fn, *args):
    """(function name, scalar arguments as text) of each call of the traced program."""
    prog = fn.compile(*args).program
    return [(c.function.name, len(c.args), tuple(a.text() for a in c.args if isinstance(a, ScalarArg)))
            for c in prog.calls]


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


# -- operator forms ------------------------------------------------------------------------------
def test_matrix_vector_products():
    assert calls(kfuse.jit(lambda A, x: A @ x), A, x) == [("gemv", 2, ())]
    assert calls(kfuse.jit(lambda A, r: A.T @ r), A, r) == [("gemtv", 2, ())]
    assert calls(kfuse.jit(lambda A, r: r @ A), A, r) == [("gemtv", 2, ())]
    assert calls(kfuse.jit(lambda a, A, x: a * (A @ x)), 2.0, A, x) == [("gemv", 3, ("a",))]
    assert calls(kfuse.jit(lambda A, r: (A.T @ r) * 3), A, r) == [("gemtv", 3, ("3.0",))]
    # x @ A.T is A @ x (it was refused as "vector @ matrix")
    assert calls(kfuse.jit(lambda A, x: x @ A.T), A, x) == [("gemv", 2, ())]
    assert calls(kfuse.jit(lambda A, x, r: np.dot(x, A.T) - r), A, x, r) == [("gemv", 5, ("1.0", "-1.0"))]
    with pytest.raises(kfuse.TraceError, match="x @ A.T: the length of x and the columns of A: sizes 33 and 31"):
        kfuse.jit(lambda A, r: r @ A.T).compile(A, r)


def test_five_argument_gemv_is_one_call():
    f = kfuse.jit(lambda a, A, x, b, y: a * (A @ x) + b * y)
    assert calls(f, 1.5, A, x, 2.5, u) == [("gemv", 5, ("a", "b"))]
    g = kfuse.jit(lambda A, x, y: A @ x - y)
    assert calls(g, A, x, u) == [("gemv", 5, ("1.0", "-1.0"))]
    h = kfuse.jit(lambda a, A, r, y: y + a * (A.T @ r))
    assert calls(h, 2.0, A, r, x) == [("gemtv", 5, ("a", "1.0"))]


def test_gesummv_two_products_and_a_shared_product():
    f = kfuse.jit(lambda a, b, A, B, x: a * (A @ x) + b * (B @ x))
    assert calls(f, 1.0, 2.0, A, B, x) == [("gemv", 2, ()), ("gemv", 5, ("a", "b"))]

    def twice(A, x, y):
        q = A @ x              # read twice: computed once, then an axpy and a dot
        return q + y, q @ q
    assert calls(kfuse.jit(twice), A, x, u) == [("gemv", 2, ()), ("vadd", 2, ()), ("dot", 2, ())]


@pytest.mark.parametrize("body, expected", [
    (lambda a, b, x, y: a * x + y, [("axpy", 3, ("a",))]),
    (lambda a, b, x, y: y + x * a, [("axpy", 3, ("a",))]),
    (lambda a, b, x, y: a * x + b * y, [("axpby", 4, ("a", "b"))]),
    (lambda a, b, x, y: x + y, [("vadd", 2, ())]),
    (lambda a, b, x, y: x - y, [("axpy", 3, ("-1.0",))]),
    (lambda a, b, x, y: 2 * x, [("scal", 2, ("2.0",))]),
    (lambda a, b, x, y: -x, [("scal", 2, ("-1.0",))]),
    (lambda a, b, x, y: x / a, [("scal", 2, ("1.0 / a",))]),
    (lambda a, b, x, y: x + a * x, [("scal", 2, ("1.0 + a",))]),
    (lambda a, b, x, y: x @ y, [("dot", 2, ())]),
    (lambda a, b, x, y: a * x + b * y + x, [("axpby", 4, ("a", "b")), ("vadd", 2, ())]),
])
def test_vector_forms(body, expected):
    f = kfuse.jit(body)
    got = calls(f, 1.5, 2.5, x, y)
    if expected[0][0] == "axpby" and len(expected) == 2:     # x appears twice: (a + 1) x + b y
        assert got == [("axpby", 4, ("a + 1.0", "b"))]
    else:
        assert got == expected


def test_matrix_forms():
    assert calls(kfuse.jit(lambda A, B: A + B), A, B) == [("madd", 2, ())]
    assert calls(kfuse.jit(lambda A, u, v: A + kfuse.outer(u, v)), A, u, x) == [("ger", 3, ())]
    gemver = kfuse.jit(lambda A, u1, v1, u2, v2: A + kfuse.outer(u1, v1) + kfuse.outer(u2, v2))
    assert calls(gemver, A, u, x, u, y) == [("ger", 3, ()), ("ger", 3, ())]
    scaled = kfuse.jit(lambda a, A, u, v: A + a * kfuse.outer(u, v))
    assert calls(scaled, 2.0, A, u, x) == [("scal", 2, ("a",)), ("ger", 3, ())]


def test_library_functions_by_name_and_alias():
    assert calls(kfuse.jit(lambda A, x: kfuse.lib.gemv(A, x)), A, x) == [("gemv", 2, ())]
    assert calls(kfuse.jit(lambda a, x, b, y: kfuse.lib.waxpby(a, x, b, y)), 1.0, x, 2.0, y) == [
        ("axpby", 4, ("a", "b"))]
    f = kfuse.jit(lambda a, A, x, y: kfuse.lib.gemtv(a, A, x, -a, y))
    assert calls(f, 2.0, A, u, x) == [("gemtv", 5, ("a", "-a"))]
    for name, args in [("scal", (2.0, x)), ("axpy", (2.0, x, y)), ("vadd", (x, y)), ("dot", (x, y)),
                       ("ger", (A, u, x)), ("madd", (A, B)), ("gemv", (2.0, A, x)), ("gemtv", (A, u))]:
        params = ", ".join(f"p{k}" for k in range(len(args)))
        fn = eval(f"lambda {params}: kfuse.lib.{name}({params})", {"kfuse": kfuse})
        assert calls(kfuse.jit(fn), *args)[0][0] == name


def test_user_library_function(tmp_path):
    folder = make_library(tmp_path / "mine", [scal_function()])
    f = kfuse.jit(lambda a, x: kfuse.lib.myscal(a, x) + x, library=folder)
    assert calls(f, 2.0, x) == [("myscal", 2, ("a",)), ("vadd", 2, ())]


def test_cg_step_script_reads_like_the_function():
    def cg_step(A, x, r, p, rr):
        q = A @ p
        alpha = rr / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        return x, r, p, rr_new
    f = kfuse.jit(cg_step)
    Asq = np.zeros((N, N), np.float32)
    low = f.trace(Asq, u, u, u, Dev0())
    assert low.device_scalars == ["rr"] and [n for n, _ in low.inputs] == ["A", "x", "r", "p", "rr"]
    assert "s3 = rr / s2;" in low.script and "alpha = rr / (p @ q)" in low.script
    assert calls(f, Asq, u, u, u, Dev0()) == [
        ("gemv", 2, ()), ("dot", 2, ()), ("axpy", 3, ("rr / s2",)), ("axpy", 3, ("-(rr / s2)",)),
        ("dot", 2, ()), ("axpy", 3, ("s6 / rr",))]
    prog = f.compile(Asq, u, u, u, Dev0()).program
    assert [v.name for v in prog.inputs if v.on_device] == ["rr"]
    assert [v.name for v in prog.outputs] == ["v4", "v5", "v7", "s6"]


def test_the_program_is_built_from_the_trace_and_its_script_parses_back_to_it(monkeypatch):
    """The jit builds the program IR from the lowered calls, parsing no text (issue 43); the
    script is a rendering of it for people that parses back to the same program."""
    from kfuse.frontend import parser as parser_module

    def step(A, x, r, p, rr):
        alpha = rr / (p @ (A @ p))
        return x + alpha * p, r - alpha * (A @ p), kfuse.sqrt(alpha) - 1e-05
    with monkeypatch.context() as m:
        m.setattr(parser_module, "tokenize", lambda *a: pytest.fail("the jit parsed a script"))
        low = kfuse.jit(step).trace(np.zeros((N, N), np.float32), u, u, u, Dev0())
    assert low.program.source == low.script and low.program.name == "step"
    parsed = parse_script(low.script, kfuse.load_library(), name="step").with_device_scalars(["rr"])
    assert parsed == low.program and parsed.dim_of == low.program.dim_of


# -- errors --------------------------------------------------------------------------------------
def _raises(fn, *args, match):
    with pytest.raises(kfuse.TraceError, match=match) as e:
        fn.compile(*args)
    return e.value


def test_unsupported_operations_name_the_line():
    def fourier(x, y):
        z = np.fft.fft(x * y)
        return z
    line = inspect.getsourcelines(fourier)[1] + 1
    e = _raises(kfuse.jit(fourier), x, y, match="fft\\(\\) of a traced value: kfuse traces operators")
    assert e.line == line and e.file == __file__ and "np.fft.fft(x * y)" in str(e) and f"test_jit.py:{line}" in str(e)

    cases = [
        (lambda A, B: A @ B, (A, A.T.copy()), "matrix @ matrix maps onto no library function"),
        (lambda u, v: kfuse.outer(u, v), (u, x), "outer\\(u, v\\) alone maps onto no library function"),
        (lambda A, x: A.max(axis=1) + x, (A, x), "max along an axis: kfuse reduces a whole vector"),
        (lambda a, x: np.exp(a * a) * x, (2.0, x), "exp of scalars: scalar arithmetic is"),
        (lambda x: x.astype(np.float64), (x,), "\\.astype of a traced value"),
        (lambda x: x[0] @ x, (x,), "indexing of a traced value"),
        (lambda x: np.asarray(x), (x,), "conversion to an array of a traced value"),
        (lambda x: x.shape[0] * x, (x,), "shape of a traced value"),
        (lambda A, x: kfuse.lib.gemv(x, x), (A, x), "argument 1 \\(A\\) of gemv must be a matrix, got a vector"),
        (lambda A, x: kfuse.lib.gemvv(A, x), (A, x), "unknown library function gemvv \\(did you mean gemv\\?\\)"),
        (lambda A, x: kfuse.lib.gemv(A, x, x), (A, x), "gemv takes 2 or 3 or 5 arguments, 3 given"),
        (lambda A, r: A @ r, (A, r), "the columns of A and the length of x: sizes 31 and 33 differ"),
        (lambda x, y: (x + y, 1.0), (x, y), "returns a float as result 2"),
        (lambda x: x, (x,), "computes nothing on the GPU"),
        (lambda x: x / 0.0, (x,), "division by zero"),
        (lambda a, x: (a / 0) * x, (2.0, x), "division by zero"),
    ]
    for fn, args, match in cases:
        e = _raises(kfuse.jit(fn), *args, match=match)
        assert e.file == __file__ and e.line > 0, match


def test_other_operators_attributes_and_python_errors_are_trace_errors():
    """Every mistake inside a traced function is a TraceError naming the user's line: operators
    with no library function, attributes a traced value lacks (still an AttributeError to
    hasattr), and the user's own Python failing while it is traced (before: raw TypeError,
    AttributeError or ZeroDivisionError tracebacks from kfuse's tracer)."""
    cases = [
        (lambda x, y: (x @ y) // 2 * x, "// of a traced value maps onto no library function"),
        (lambda x, y: 2 % (x @ y) * x, "% of a traced value"),
        (lambda x, y: x & y, "& of a traced value"),
        (lambda x, y: ~x + y, "~ of a traced value"),
        (lambda x, y: 2.0 ** (x @ y) * x, "\\*\\* \\(a traced exponent\\)"),
        (lambda x, y: round(x @ y) * x, "round\\(\\) of a traced value"),
        (lambda x, y: (x + y).cumsum(), "\\.cumsum of a traced value: a traced value supports \\+ - \\* / \\*\\* @"),
        (lambda x, y: x.reshape(-1) + y, "\\.reshape of a traced value"),
    ]
    for fn, match in cases:
        e = _raises(kfuse.jit(fn), x, y, match=match)
        assert e.file == __file__ and e.line > 0, match

    def own_bug(x, y):
        z = x + y
        n = len(z.__class__.__name__) / 0
        return z * n
    line = inspect.getsourcelines(own_bug)[1] + 2
    e = _raises(kfuse.jit(own_bug), x, y, match="ZeroDivisionError while tracing own_bug: division by zero")
    assert e.file == __file__ and e.line == line and "n = len(" in str(e)
    seen = []
    kfuse.jit(lambda x, y: seen.append((hasattr(x, "cumsum"), getattr(x, "reshape", None))) or x + y).compile(x, y)
    assert seen == [(False, None)]


def test_value_dependent_control_flow_says_what_to_do():
    def branch(x, y):
        if x @ y > 0:
            return x + y
        return x - y
    line = inspect.getsourcelines(branch)[1] + 1
    e = _raises(kfuse.jit(branch), x, y, match="a comparison of a traced value")
    assert e.line == line and "move the control flow out of the @kfuse.jit function" in str(e)
    for fn, what in [(lambda x, y: x + y if bool(x @ y) else x, "bool\\(\\)"),
                     (lambda x, y: float(x @ y) * x, "float\\(\\) of a traced value: it would wait for the GPU"),
                     (lambda x, y: x if x @ y == 0 else y, "== / !=")]:
        _raises(kfuse.jit(fn), x, y, match=what)


def test_argument_errors_name_the_callers_line():
    f = kfuse.jit(lambda x, y: x + y)
    with pytest.raises(kfuse.TraceError, match="mixed dtypes in a call of <lambda>: x is float32, y is float64") as e:
        line = here() + 1
        f.compile(x, np.zeros(M, np.float64))
    assert e.value.line == line and e.value.file == __file__
    _raises(f, x, np.zeros((2, 3, 4, 5), np.float32), match="argument y of <lambda> has rank 4")
    # a 3-D array is a vector laid out as a grid (its length the product of its shape)
    _raises(f, x, np.zeros((2, 3, 4), np.float32), match=r"\+: shapes \(31,\) and \(24,\) differ")
    _raises(f, x, "y", match="argument y of <lambda>: expected an array or a number, got str")
    _raises(f, x, np.zeros(M, np.int32), match="dtype int32")
    _raises(kfuse.jit(lambda a, b: a * b), 1.0, 2.0, match="without a vector or matrix argument")
    with pytest.raises(KfuseError, match="must be an ordinary positional parameter"):
        kfuse.jit(lambda *xs: xs[0])
    with pytest.raises(KfuseError, match="missing a required argument"):
        f(x)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (2, 0, 3)])
def test_empty_arguments_name_the_argument(shape):
    """An empty argument traced, then failed planning as "sizes['x.len'] must be a positive
    integer, got 0": a size the caller never gave (a loop's state as "sizes['state0.len']")."""
    f = kfuse.jit(lambda A, x: A * 2.0 + x)
    with pytest.raises(kfuse.TraceError, match=r"argument A of <lambda> is empty \(shape") as e:
        line = here() + 1
        f.compile(np.zeros(shape, np.float32), np.zeros(shape[-1:] or (1,), np.float32))
    assert e.value.line == line and e.value.file == __file__
    with pytest.raises(kfuse.TraceError, match=r"explain_loop: state entry 0 is empty"):
        kfuse.explain_loop(lambda i, s: s * 2.0, np.zeros(shape, np.float32))


def test_sqrt_of_a_negative_number_is_nan_as_on_the_device():
    """kfuse.sqrt(-4.0) outside a jitted function was the complex number 2j (Python's ** 0.5):
    the function run as its own reference disagreed with the device's NaN; inside one, the
    constant is refused as any NaN is."""
    assert math.isnan(kfuse.sqrt(-4.0)) and math.isnan(kfuse.sqrt(-1)) and kfuse.sqrt(4) == 2.0
    assert isinstance(kfuse.sqrt(2.0), float) and np.isnan(kfuse.sqrt(np.float64(-4.0)))
    c = -4.0
    _raises(kfuse.jit(lambda x: kfuse.sqrt(c) * x), x, match="the number nan is not finite")


def test_traced_values_do_not_escape():
    kept = []

    def keep(x, y):
        kept.append(x)
        return x + y
    kfuse.jit(keep).compile(x, y)
    other = kfuse.jit(lambda x, y: kept[0] + y)
    _raises(other, x, y, match="a value traced by another call")
    with pytest.raises(kfuse.TraceError, match="no shipped function with a reference"):
        kfuse.lib.gemv(A)
    Ar, xr = np.random.default_rng(0).standard_normal((N, M)), np.random.default_rng(1).standard_normal(M)
    assert np.allclose(kfuse.lib.gemv(Ar, xr), Ar @ xr)       # outside a jitted function: the reference
    assert np.array_equal(kfuse.outer(np.arange(2.0), np.arange(3.0)), np.outer(np.arange(2.0), np.arange(3.0)))


# -- the cache -----------------------------------------------------------------------------------
@pytest.fixture
def traces(monkeypatch):
    count = []
    real = jit_module.trace

    def counting(*a, **k):
        count.append(1)
        return real(*a, **k)
    monkeypatch.setattr(jit_module, "trace", counting)
    monkeypatch.setattr(jit_module, "_SHARED", {})
    return count


def test_cache_hits_on_the_same_signature_and_misses_on_a_new_one(fake, traces):  # noqa: F811
    def make():
        return kfuse.jit(lambda a, x, y: a * x + y, calibration=False)
    f = make()
    X, Y = FakeArray((100,)), FakeArray((100,))
    f(2.0, X, Y)
    f(3.0, FakeArray((100,)), FakeArray((100,)))
    f(a=4, x=X, y=Y)                                   # keywords, an int: the same signature
    f(2.0, FakeArray((5000,)), FakeArray((5000,)))     # another size class: planned below, not traced
    assert len(traces) == 1 and len(fake.launched) == 4
    assert [launch[3] for launch in fake.launched] == [[2.0], [3.0], [4], [2.0]]
    f(2.0, FakeArray((100,), "float64"), FakeArray((100,), "float64"))     # a new dtype
    assert len(traces) == 2 and f.compiled.dtype == "float64"
    f(FakeArray(()), X, Y)                             # a device scalar: passed by address
    assert len(traces) == 3
    assert [v.name for v in f.compiled.program.inputs if v.on_device] == ["a"]
    binding = fake.built[-1]
    assert binding.array_inputs == ["a", "x", "y"] and binding.scalar_inputs == []
    g = make()                                         # another function of the same code: shared
    g(2.0, X, Y)
    assert len(traces) == 3


def test_cache_key_holds_code_library_dtype_and_ranks(tmp_path, traces):
    def body(a, x, y):
        return a * x + y
    f = kfuse.jit(body)
    key = f.cache_key(2.0, x, y)
    assert f.cache_key(3, x, y) == key
    assert f.cache_key(2.0, x.astype(np.float64), y.astype(np.float64)) != key
    assert f.cache_key(Dev0(), x, y) != key
    assert f.cache_key(2.0, A, B) != key                      # ranks
    mine = kfuse.jit(body, library=make_library(tmp_path / "mine", [scal_function()]))
    assert mine.cache_key(2.0, x, y) != key and mine.cache_key(2.0, x, y)[1] == mine.library.digest
    f.compile(2.0, x, y)
    mine.compile(2.0, x, y)
    assert len(traces) == 2                                    # another library: traced again

    def other(a, x, y):
        return a * x - y
    f.fn.__code__ = other.__code__                             # new code: a new key, traced again
    assert f.cache_key(2.0, x, y) != key
    assert calls(f, 2.0, x, y) == [("axpby", 4, ("a", "-1.0"))] and len(traces) == 3


def test_explain_and_cuda_source_show_the_last_signature(fake):  # noqa: F811
    def both(A, p, r):
        return A @ p, A.T @ r
    f = kfuse.jit(both, calibration=False)
    with pytest.raises(KfuseError, match="has not been called or compiled yet"):
        f.explain()
    q, s = f(FakeArray((40, 50)), FakeArray((50,)), FakeArray((40,)))
    assert q[0] == "view" and s[0] == "view"
    text = f.explain()
    assert "v1 = gemv(A, p);" in text and "v2 = gemtv(A, r);" in text and "plan for both: 1 kernel(s)" in text
    assert "__global__" in f.cuda_source and "k0_gemv_gemtv" in f.cuda_source


# -- scalar arithmetic and device scalars through the script front end ---------------------------------
def test_script_scalar_arithmetic(lib):
    src = ("scalar a, s, b; vector x, y, z, w; input a, x, y;\n"
           "s = dot(x, y);\nb = sqrt(s) / (a - 2) * -a;\nz = axpy(b, x, y);\nw = axpby(-b, z, s * s, y);\nreturn z, w;\n")
    prog = parse_script(src, lib)
    alpha = prog.calls[1].args[0]
    assert alpha.op == "*" and alpha.text() == "sqrt(s) / (a - 2.0) * -a"
    assert [v.name for v in alpha.values()] == ["s", "a"]
    assert prog.calls[2].args[0].text() == "-(sqrt(s) / (a - 2.0) * -a)"
    assert prog.consumers(prog.calls[0].outputs[0]) == prog.calls[1:]
    # the float64 reference evaluates the arithmetic
    xs, ys = np.arange(1.0, 5.0), np.ones(4)
    env = evaluate(prog, {"a": 3.0, "x": xs, "y": ys})
    s = xs @ ys
    b = np.sqrt(s) / (3.0 - 2) * -3.0
    assert np.allclose(env[prog.calls[1].outputs[0].id], b * xs + ys)
    for bad, match in [("b = x + a;", "b is a scalar; the expression is a vector"),
                       ("z = scal(x, y);", "must be a scalar, x is a vector"),
                       ("b = a * ;", "expected an expression, found ';'")]:
        text = "scalar a, b; vector x, y, z; input a, x, y;\n" + bad + "\nz = scal(a, x); return z;"
        with pytest.raises(ScriptError, match=match):
            parse_script(text, lib)
    # a name assigned arithmetic may be returned: the arithmetic, computed after the plan
    prog = parse_script("scalar a, b; vector x, z; input a, x; b = 2 * a; z = scal(b, x); return z, b;", lib)
    assert [v.name for v in prog.outputs] == ["z"] and prog.returns[1].text() == "2.0 * a"


def test_arithmetic_and_device_scalars_in_the_generated_kernel():
    src = ("scalar rr, s; vector p, q, x, y; matrix A; input A, p, x, rr;\n"
           "q = gemv(A, p);\ns = dot(p, q);\ny = axpy(rr / s, p, x);\nreturn y, s;\n")
    host = kfuse.compile(src, calibration=False)
    dev = kfuse.compile(src, calibration=False, device_scalars=["rr"])
    assert host.program.with_device_scalars(["rr"]) == dev.program
    assert host.for_device_scalars(["rr"]).program == dev.program and host.for_device_scalars([]) is host
    assert "const real* __restrict__ s_rr_p," in dev.cuda_source and "((*s_rr_p) / (*s_s_p))" in dev.cuda_source
    assert "real s_rr," in host.cuda_source and "(s_rr / (*s_s_p))" in host.cuda_source
    assert "s_rr_p" not in host.cuda_source
    with pytest.raises(KfuseError, match="'p' is not a scalar input"):
        kfuse.compile(src, calibration=False, device_scalars=["p"])


def test_script_scalar_input_bound_to_a_0d_array(fake):  # noqa: F811
    prog = kfuse.compile("scalar a; vector x, y; input a, x; y = scal(a, x); return y;", calibration=False)
    X, a = FakeArray((100,)), FakeArray(())
    prog(a=2.0, x=X)
    prog(a=a, x=X)
    prog(a=a, x=X)
    host, dev = fake.built[0], fake.built[1]
    assert len(fake.built) == 2 and dev.array_inputs == ["a", "x"] and host.array_inputs == ["x"]
    assert fake.launched[-1][1] == [a.data.ptr, X.data.ptr] and fake.launched[-1][3] == []
    with pytest.raises(kfuse.LaunchError, match="a: dtype is float64"):
        prog(a=FakeArray((), "float64"), x=X)
    with pytest.raises(kfuse.LaunchError, match="a: expected a scalar \\(0-d\\) array"):
        prog(a=FakeArray((3,)), x=X)


# -- nvcc ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_traced_programs_compile_with_nvcc(nvcc, tmp_path, dtype):
    def cg_step(A, x, r, p, rr):
        q = A @ p
        alpha = rr / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rr_new = r @ r
        return x, r, r + (rr_new / rr) * p, rr_new, kfuse.sqrt(rr_new)

    def mixed(a, A, u, v, x, y):
        B = A + kfuse.outer(u, v) + a * kfuse.outer(v, v)
        w = a * (B @ x) + kfuse.sqrt(a) * y
        return B, w, B.T @ w
    Ad, xd, yd = np.zeros((N, N), dtype), np.zeros(N, dtype), np.zeros(N, dtype)
    for k, (fn, args) in enumerate([(cg_step, (Ad, xd, xd, xd, Dev0(dtype))), (cg_step, (Ad, xd, xd, xd, 1.0)),
                                    (mixed, (Dev0(dtype), Ad, xd, yd, xd, yd))]):
        nvcc_compile(nvcc, kfuse.jit(fn).compile(*args).cuda_source, tmp_path, f"jit{k}")


def test_bicg_products_share_their_pass_over_the_matrix():
    """A coefficient computed in the function (alpha from a dot product) is not taken into the
    product: A p and A^T p~ stay plain and fuse into one kernel reading A once."""
    import sys
    from conftest import ROOT
    sys.path.insert(0, str(ROOT / "examples" / "solvers"))
    import bicg
    Asq, v = np.zeros((N, N), np.float64), np.zeros(N, np.float64)
    prog = bicg.bicg_step.compile(Asq, v, v, v, v, v, Dev0("float64"))
    products = [(c.function.name, len(c.args)) for c in prog.program.calls if c.function.nesting == 2]
    assert products == [("gemv", 2), ("gemtv", 2)]
    assert {kc.call.function.name for kc in prog.plan.kernels[0].calls} == {"gemv", "gemtv"}
    f = kfuse.jit(lambda A, x, y: (x @ y) * (A @ x) + y)
    assert calls(f, Asq.astype(np.float32), u, u) == [("gemv", 2, ()), ("dot", 2, ()), ("axpy", 3, ("s2",))]


def test_a_jitted_function_called_while_tracing_is_inlined():
    @kfuse.jit
    def axpy(a, x, y):
        return a * x + y

    @kfuse.jit
    def outer_fn(a, A, x, y):
        return axpy(a, A @ x, y)
    assert calls(outer_fn, 2.0, A, x, u) == [("gemv", 5, ("a", "1.0"))]
    assert issubclass(kfuse.TraceError, ScriptError)


def test_returned_scalar_arithmetic_is_evaluated_from_the_results():
    """A scalar computed by arithmetic alone is no script result: it is evaluated after the call
    from the results and the arguments (here NumPy stands in for the device arrays)."""
    f = kfuse.jit(lambda a, x, y: (x + y, (x @ y) / a - kfuse.sqrt(a), a))
    entry = f._entry((4.0, x, y))
    low = entry.lowered
    assert low.outputs == ["v1", "s2"] and [r[0] for r in low.returns] == ["out", "expr", "arg"]
    assert not entry.direct
    v, s = np.arange(3.0, dtype=np.float32), np.array(6.0, dtype=np.float32)
    got = entry.package((v, s), (4.0, x, y))
    assert got[0] is v and got[2] == 4.0
    assert got[1].dtype == np.float32 and got[1].shape == () and got[1] == np.float32(6.0 / 4.0 - 2.0)


def test_vector_on_strips_is_an_option_and_part_of_the_key():
    """``@kfuse.jit(vector_on_strips=True)``: a CG step's A p and p . (A p) in one kernel (the
    option's plans, kfuse.compile's); off by default, and the options are part of the cache key."""
    def step(A, p):
        q = A @ p
        return q, p @ q
    Asq, v = np.zeros((1024, 1024), np.float32), np.zeros(1024, np.float32)
    plain, asked = kfuse.jit(step), kfuse.jit(step, vector_on_strips=True)
    assert len(plain.compile(Asq, v).kernels) == 2
    (k,) = asked.compile(Asq, v).plan.kernels
    assert [kc.call.function.name for kc in k.calls] == ["gemv", "dot"] and any(kc.on_rows for kc in k.calls)
    assert plain.cache_key(Asq, v) != asked.cache_key(Asq, v)


def test_compile_sets_what_script_explain_and_cuda_source_describe():
    """After ``fn.compile(...)`` (no call, NumPy arrays), ``.script``, ``.explain()`` and
    ``.cuda_source`` describe that signature; ``fn.trace(...)`` shows the script at a prompt."""
    def step(A, p):
        q = A @ p
        return q, p @ q
    f = kfuse.jit(step, calibration=False)
    A, p = np.zeros((64, 64), np.float32), np.zeros(64, np.float32)
    prog = f.compile(A, p)
    assert f.compiled is prog
    assert "gemv(A, p)" in f.script and "gemv(A, p)" in f.explain() and "__global__" in f.cuda_source
    traced = f.trace(A, p)
    assert repr(traced) == str(traced) == traced.script.rstrip("\n")
    assert repr(traced).startswith("# traced") and "return" in repr(traced)


def test_closures_over_different_values_are_different_programs():
    """The program cache keys a function by what it closes over: two closures of one function over
    different tuples, lists, dicts or NumPy scalars trace different programs (they once shared the
    first one's, a wrong answer in silence); equal values share one."""
    def make(c):
        def f(x, y):
            return c[0] * x + y
        return f
    x = np.zeros(37, np.float32)
    for a, b in (((2.0,), (3.0,)), ([2.0], [3.0]), ({0: 2.0}, {0: 3.0})):
        f1, f2 = kfuse.jit(make(a)), kfuse.jit(make(b))
        assert f1.cache_key(x, x) != f2.cache_key(x, x)
        assert f1.compile(x, x) is not f2.compile(x, x)
        assert "2" in f1.trace(x, x).script and "3" in f2.trace(x, x).script
    assert kfuse.jit(make((2.0,))).compile(x, x) is kfuse.jit(make((2.0,))).compile(x, x)
    s1, s2 = kfuse.jit(make((np.float32(2.0),))), kfuse.jit(make((np.float32(3.0),)))
    assert s1.cache_key(x, x) != s2.cache_key(x, x)


def test_loop_bodies_closing_over_different_values_are_different_bodies():
    """The same for device loops' traced bodies (loops.traced_body): a lambda over one coefficient tuple
    is not the body traced for another."""
    from kfuse.jit import loops as loops
    x = np.zeros(37, np.float32)

    def body(c):
        return lambda i, s: (s[0] * c[0] + s[1], s[1])
    b1, _ = loops.traced_body(body((2.0,)), True, (x, x), "fori_loop")
    b2, _ = loops.traced_body(body((3.0,)), True, (x, x), "fori_loop")
    b3, _ = loops.traced_body(body((2.0,)), True, (x, x), "fori_loop")
    assert b1 is not b2 and b1 is b3


_GLOBAL_BODY = None


def test_bodies_read_through_a_rebound_global_are_different_bodies():
    """A loop body written ``lambda i, s: body(*s)`` with ``body`` a module global rebound between
    loops (a script trying several step functions) is traced again: the key holds the globals the
    code names, not only its closure (the first body's program was once run for every later one,
    a wrong answer in silence).  Likewise a jitted function calling a rebound global helper."""
    from kfuse.jit import loops as loops
    global _GLOBAL_BODY
    x = np.zeros(37, np.float32)
    scripts = []
    for c in (2.0, 3.0, 2.0):
        def made(x, y, c=c):
            return x * c + y, y
        _GLOBAL_BODY = made
        b, _ = loops.traced_body(lambda i, s: _GLOBAL_BODY(*s), True, (x, x), "fori_loop")
        scripts.append(b.lowered.script)
    assert "2.0" in scripts[0] and "3.0" in scripts[1] and "3.0" not in scripts[0]
    assert scripts[2] == scripts[0]
    _GLOBAL_BODY = lambda x, y: (x + y, y)          # noqa: E731
    f1 = kfuse.jit(lambda x, y: _GLOBAL_BODY(x, y)[0])
    k1, p1 = f1.cache_key(x, x), f1.compile(x, x)
    _GLOBAL_BODY = lambda x, y: (x - y, y)          # noqa: E731
    f2 = kfuse.jit(lambda x, y: _GLOBAL_BODY(x, y)[0])
    assert f2.cache_key(x, x) != k1
    assert f2.compile(x, x) is not p1 and "-1.0" in f2.script


def test_a_recursive_global_function_has_a_key():
    """A function that names itself (recursion through a module global) is keyed by identity
    where its key would contain itself: the key is made, and is the same twice."""
    from kfuse.jit.decorator import code_key

    assert code_key(_countdown) == code_key(_countdown)


def _countdown(n):
    return _countdown(n - 1) if n else 0


def test_compile_plans_for_the_sizes_it_is_given_not_those_traced_first():
    """A signature is traced once, at the sizes it first comes with; ``.compile`` at other sizes
    gives the plan a call at those sizes runs (their size class), and ``.compiled``, ``.explain()``
    and ``.cuda_source`` describe it; a grid vector's size is its entries."""
    @kfuse.jit
    def step(A, x, y):
        return A @ x + 2.0 * y, x @ y

    small = step.compile(np.zeros((1024, 1024), np.float32), np.zeros(1024, np.float32), np.zeros(1024, np.float32))
    large = step.compile(np.zeros((4096, 4096), np.float32), np.zeros(4096, np.float32), np.zeros(4096, np.float32))
    assert sorted(small.search.dims.values()) == [1024] and sorted(large.search.dims.values()) == [4096]
    assert large.plan.predicted > small.plan.predicted
    assert step.compiled is large and step.explain().endswith(large.describe())
    assert step.cuda_source == large.cuda_source
    again = step.compile(np.zeros((1000, 1000), np.float32), np.zeros(1000, np.float32), np.zeros(1000, np.float32))
    assert again is small                                   # 1000 is of 1024's size class

    @kfuse.jit
    def grid(u, v):
        return kfuse.lib.lap7(u) @ v
    assert grid.compile(np.zeros((8, 8, 8)), np.zeros((8, 8, 8))).search.dims[0] == 512
    assert grid.compile(np.zeros((16, 16, 16)), np.zeros((16, 16, 16))).search.dims[0] == 4096
