"""Ordinary array code on the CPU: expression statements in scripts and traced NumPy code become
synthesized functions (library/synth.py) with the metadata of hand-written ones; their references
agree with NumPy; they fuse with the products (a logistic-regression gradient reads A once);
their CUDA builds with nvcc in both dtypes; mistakes are clear errors at the user's line."""
import logging

import numpy as np
import pytest

import kfuse
from kfuse.errors import KfuseError, ScriptError, TraceError
from kfuse.frontend.parser import parse_script
from kfuse.library import ewexpr, expr as lexpr, synth

from test_nvcc import nvcc_compile

LIB = kfuse.load_library()
HEAD = "vector x, y, w, z, r; matrix A, B; vector d, e; scalar a, s, m;\ninput x, y, w, A, d, e, a;\n"


def _parse(body: str, ret: str = "z"):
    return parse_script(HEAD + body + f"\nreturn {ret};\n", LIB)


def test_expression_statements_become_synthesized_calls():
    prog = _parse("z = x * y + 2.0 * exp(w);")
    (call,) = prog.calls
    fn = call.function
    assert fn.synthesized and fn.kind == "map" and fn.name.startswith("map_")
    assert [p.name for p in fn.inputs] == ["x0", "x1", "x2"] and [v.name for v in call.args] == ["x", "y", "w"]
    assert {v.name for v in fn.variants} == {"warp", "quad", "strip"}
    assert fn.reference == "x0 * x1 + 2.0 * np.exp(x2)" and fn.flops == "4 * out"
    # the same expression is the same function; another number is another
    assert _parse("z = w * d + 2.0 * exp(y);").calls[0].function is fn
    assert _parse("z = x * y + 3.0 * exp(w);").calls[0].function is not fn
    # the expression is in the program's text (its key and digest)
    assert "z = x * y + 2.0 * exp(w);" in prog.source


def test_reductions_matrices_and_nested_calls():
    prog = _parse("r = gemv(A, x);\ns = sum(abs(r - x));\nm = max(r) / s;\nz = exp(gemv(A, y)) * s;", "z, m")
    kinds = [(c.function.kind, c.function.name.split("_")[0]) for c in prog.calls]
    assert kinds == [("map-reduce", "gemv"), ("reduce", "sum"), ("reduce", "max"), ("map-reduce", "gemv"),
                     ("map", "map")]
    red = prog.calls[1].function
    assert red.param("n0").reach == "any" and red.outputs[0].reduce == "sum"
    assert prog.calls[1].args[-1].name == "x"            # bounded by a program input's length
    assert prog.returns[1].text().endswith(" / s")
    mean = _parse("s = mean(x * y);\nz = x * s;").calls[0].function
    assert [p.name for p in mean.outputs] == ["out", "count"]
    mat = parse_script("matrix A, B; vector d, e; scalar a; input A, d, e, a;\n"
                       "B = A * d[:, None] + e[None, :] * A / a - 2.0 * A + e;\nreturn B;\n", LIB)
    fn = mat.calls[0].function
    assert fn.kind == "map-map" and [p.name for p in fn.inputs] == ["A0", "u0", "v0", "s0"]
    assert {v.name for v in fn.variants} == {"rows", "quad"}


REFERENCE = [   # expression (over x0, x1), NumPy
    (("+", ("in", 0), ("in", 1)), lambda x, y: x + y),
    (("/", ("num", 1.0), ("+", ("num", 1.0), ("exp", ("neg", ("in", 0))))), lambda x, y: 1 / (1 + np.exp(-x))),
    (("sigmoid", ("in", 0)), lambda x, y: 1 / (1 + np.exp(-x))),
    (("maximum", ("in", 0), ("in", 1)), np.maximum),
    (("where", ("<", ("in", 0), ("in", 1)), ("in", 0), ("num", -1.0)), lambda x, y: np.where(x < y, x, -1.0)),
    (("pow", ("in", 0), ("num", -2.0)), lambda x, y: x ** -2.0),
    (("pow", ("abs", ("in", 0)), ("num", 0.5)), lambda x, y: np.abs(x) ** 0.5),
    (("-", ("tanh", ("in", 0)), ("log", ("abs", ("in", 1)))), lambda x, y: np.tanh(x) - np.log(np.abs(y))),
    (("*", ("sin", ("in", 0)), ("cos", ("in", 1))), lambda x, y: np.sin(x) * np.cos(y)),
    (("minimum", ("sqrt", ("abs", ("in", 0))), ("in", 1)), lambda x, y: np.minimum(np.sqrt(np.abs(x)), y)),
    (("-", ("in", 0), ("-", ("in", 1), ("in", 0))), lambda x, y: x - (y - x)),
    (("/", ("in", 0), ("*", ("in", 1), ("in", 0))), lambda x, y: x / (y * x)),
]


@pytest.mark.parametrize("case", range(len(REFERENCE)))
def test_references_and_script_text_agree_with_numpy(case):
    """The function's reference (checked by library/expr.py) is NumPy's value, and its script text
    parses back to the same function."""
    e, numpy_fn = REFERENCE[case]
    rng = np.random.default_rng(case)
    x, y = rng.uniform(-2, 2, 33), rng.uniform(0.5, 2, 33)
    read = sorted(ewexpr.inputs_read(e))
    renumber = {k: n for n, k in enumerate(read)}
    e = _renumbered(e, renumber)
    fn = synth.synthesize(e, ("vector",) * len(read))
    values = [(x, y)[k] for k in read]
    got = lexpr.evaluate(fn.reference, {f"x{n}": v for n, v in enumerate(values)}, "reference")
    assert np.allclose(got, numpy_fn(x, y), rtol=1e-14, atol=0)
    text = ewexpr.text(e, lambda k: "xy"[k])
    again = parse_script(f"vector x, y, z; input x, y; z = {text}; return z;", LIB).calls[0].function
    assert again is fn
    for reduce, np_fn in (("sum", np.sum), ("max", np.max), ("min", np.min)):
        red = synth.synthesize(e, fn_kinds := ("vector",) * len(read), reduce)
        scope = {f"x{n}": v for n, v in enumerate(values)} | {"n0": x}
        assert np.allclose(lexpr.evaluate(red.reference, scope, "reference"), np_fn(numpy_fn(x, y)), rtol=1e-13)
        assert red.kind == "reduce" and len(fn_kinds) == len(read)


def _renumbered(e, renumber):
    if e[0] == "in":
        return ("in", renumber[e[1]])
    if e[0] == "num":
        return e
    return (e[0], *(_renumbered(a, renumber) for a in e[1:]))


def _logreg(A, x, y):
    return A.T @ (1 / (1 + np.exp(-(A @ x))) - y)


def _jacobi(R, b, d, x):
    xn = (b - R @ x) / d
    return xn, np.abs(xn - x).max()


@pytest.mark.parametrize("n", [1024, 8192])
def test_a_map_between_two_products_reads_the_matrix_once(n):
    A = np.zeros((n, n), np.float32)
    v = np.zeros(n, np.float32)
    compiled = kfuse.jit(_logreg).compile(A, v, v)
    assert len(compiled.plan.kernels) == 1
    assert len(kfuse.jit(lambda A, x, y, w: A.T @ (w * (A @ x - y))).compile(A, v, v, v).plan.kernels) == 1
    # after the last product a vector call asks for vector_on_strips (docs/design.md)
    assert len(kfuse.jit(_jacobi).compile(A, v, v, v).plan.kernels) == 2
    assert len(kfuse.jit(_jacobi, vector_on_strips=True).compile(A, v, v, v).plan.kernels) == 1


def test_polybench_kernels_trace_as_written():
    def gemver(A, u1, v1, u2, v2, w, x, y, z):
        A = A + np.dot(u1[:, np.newaxis], v1[np.newaxis, :]) + np.dot(u2[:, np.newaxis], v2[np.newaxis, :])
        x = x + 1.2 * np.dot(A.T, y) + z
        w = w + 1.5 * np.dot(A, x)
        return A, x, w

    def mvt(A, x1, x2, y1, y2):
        return x1 + np.dot(A, y1), x2 + np.dot(A.T, y2)

    A = np.zeros((64, 64), np.float32)
    v = np.zeros(64, np.float32)
    script = kfuse.jit(gemver).trace(A, *[v] * 8).script
    assert script.count("= ger(") == 2 and "gemtv(" in script and "gemv(" in script
    assert len(kfuse.jit(mvt).compile(A, v, v, v, v).plan.kernels) == 1


def test_synthesized_functions_are_priced_by_the_calibration(caplog):
    """No 'has no measurement' notice: their routines are priced as the shipped ones they share."""
    import kfuse.cost.calibrated as calibrated
    calibrated._noticed.clear()
    with caplog.at_level(logging.INFO):
        prog = kfuse.compile(HEAD + "z = x * y + exp(w);\ns = sum(z * z);\nB = 2.0 * A + d[:, None];\n"
                             "return z, s, B;\n")
    assert "no measurement" not in caplog.text
    assert prog.plan.predicted > 0


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_synthesized_code_builds(nvcc, tmp_path, dtype):
    """Maps of every function, reductions of each kind (alone, fused with a map, and on strips
    after a gemv), matrix maps with broadcasting: one module, warnings as errors."""
    body = ("z = where(x > y, maximum(x, 0.5), minimum(y, -0.5)) + abs(w) ** 3 + sqrt(abs(x)) * log(abs(y) + 1.0)"
            " + tanh(w) * sin(x) - cos(y) / sigmoid(x) + (x != y) - exp(-w) * a;\n"
            "s = sum(z * z);\nm = max(abs(z - x)) + min(x) - mean(y);\n"
            "B = A * d[:, None] + e[None, :] * 2.0 - A / a;\nr = gemv(B, x);\n"
            "d = rowsum(A * e[None, :]) + colsum(abs(B) * x[:, None]);\n"
            "w = r * r + y;\n")
    src = kfuse.compile(HEAD + body + "return z, s, m, B, w;\n", dtype=dtype).cuda_source
    nvcc_compile(nvcc, src, tmp_path, f"ew_{dtype}")
    v = np.zeros(1000, dtype)
    for strips in (False, True):
        src = kfuse.jit(_jacobi, vector_on_strips=strips).compile(np.zeros((1000, 1000), dtype), v, v, v).cuda_source
        nvcc_compile(nvcc, src, tmp_path, f"jacobi_{dtype}_{strips}")


SCRIPT_ERRORS = [
    ("s = exp(a);", "exp\\(...\\) of a scalar: elementwise functions and operators take vectors and matrices"),
    ("s = a ** 2;", "\\*\\* of a scalar: .* \\(write t \\* t for t \\*\\* 2\\)"),
    ("z = 2.0 + 3.0;", "z is a vector; the expression is a scalar"),
    ("z = x / 0;", "division by zero"),
    ("z = x ** y;", "the exponent of \\*\\* is a number"),
    ("z = x ** 9;", "the exponent of \\*\\* is at most 8"),
    ("s = x + y;", "s is a scalar; the expression is a vector"),
    ("z = sum(A);", "sum takes a vector expression, got a matrix"),
    ("z = foo(x);", "unknown function foo"),
    ("z = exps(x);", "unknown function exps \\(did you mean exp\\?\\)"),
    ("z = exp(x, y);", "exp takes 1 argument\\(s\\), 2 given"),
    ("z = x[1, None];", "a vector is indexed only to broadcast it"),
    ("z = A[:, None];", "\\[:, None\\] and \\[None, :\\] broadcast a vector"),
    ("z = dot(x, y) * exp(x) + gemv(A, 2.0);", "must be a vector"),
]


@pytest.mark.parametrize("case", range(len(SCRIPT_ERRORS)))
def test_script_errors_name_the_line(case):
    body, match = SCRIPT_ERRORS[case]
    with pytest.raises(ScriptError, match=match) as e:
        _parse(body)
    assert e.value.line == 3


def test_long_expressions_are_refused_not_a_recursion_error():
    with pytest.raises(ScriptError, match="more than 1000 operations"):
        _parse("z = " + " + ".join(["x * y"] * 600) + ";")
    with pytest.raises(ScriptError, match="more than 1000 operations"):     # an argument of a library call
        _parse("z = scal(2.0, " + " + ".join(["x"] * 30000) + ");")
    # a library call's argument may hold a reduction; its scalar arguments may be of any length
    assert [c.function.kind for c in _parse("z = scal(sum(x * x) / 2.0, x - y);").calls] == ["reduce", "map", "map"]
    assert len(_parse("z = scal(" + " + ".join(["a"] * 30000) + ", x);").calls) == 1
    # scalar arithmetic of any length stays scalar arithmetic
    prog = _parse("s = " + " + ".join(["a"] * 3000) + ";\nz = x * s;")
    assert len(prog.calls) == 1


TRACE_ERRORS = [
    (lambda A, x: A.max(axis=0) + x, "max along an axis"),
    (lambda A, x: np.exp(A).sum(axis=1) + x, "not 0 where the matrix is 0"),
    (lambda A, x: (A + x[:, None]).sum(axis=1) + x, "not 0 where the matrix is 0"),
    (lambda A, x: np.exp(x @ x) * x, "exp of scalars"),
    (lambda A, x: x ** x, "\\*\\* takes a number as its exponent"),
    (lambda A, x: x[3] + x, "indexing of a traced value"),
    (lambda A, x: np.cumsum(x), "cumsum\\(\\) of a traced value"),
    (lambda A, x: np.linalg.norm(x, 3), "norm of order 3"),
    (lambda A, x: A * x[:4, None], "indexing of a traced value"),
    (lambda A, x: A + x[:, None] * np.ones(3), "cannot be combined with a ndarray"),
]


@pytest.mark.parametrize("case", range(len(TRACE_ERRORS)))
def test_trace_errors_name_the_line(case):
    fn, match = TRACE_ERRORS[case]
    with pytest.raises(TraceError, match=match) as e:
        kfuse.jit(fn).compile(np.zeros((5, 5), np.float32), np.zeros(5, np.float32))
    assert e.value.file == __file__


def test_broadcast_shapes_are_checked():
    with pytest.raises(TraceError, match="do not broadcast together"):
        kfuse.jit(lambda A, x: A * x).compile(np.zeros((5, 6), np.float32), np.zeros(5, np.float32))
    # a vector beside a matrix runs along its columns (NumPy's rule); v[:, None] along its rows
    script = kfuse.jit(lambda A, u, v: A * v + u[:, None]).trace(np.zeros((5, 6), np.float32),
                                                               np.zeros(5, np.float32), np.zeros(6, np.float32)).script
    assert "(A * v) + (u[:, None])" in script


def test_a_library_without_the_shipped_one_is_refused_clearly(tmp_path):
    with pytest.raises(KfuseError, match="an elementwise function needs a vector or matrix input"):
        synth.synthesize(("+", ("in", 0), ("num", 1.0)), ("scalar",))


def test_the_tuning_store_keeps_plans_of_synthesized_functions(tmp_path, monkeypatch):
    """A stored plan of a program with synthesized calls is found again by a new compile of the
    same text (its functions are made again from it) and used as a library call's is."""
    import kfuse.runtime.gpu as gpu
    from kfuse.tuning.store import TuningStore, store_key
    script = HEAD + "z = x * y + 2.0 * exp(w);\nr = gemv(A, z);\ns = sum(abs(r - x));\nreturn r, s;\n"
    model = "NVIDIA H100 80GB HBM3"
    first = kfuse.compile(script, tuned=False)
    other = next(p for p in first.search.plans() if p.kernels != first.plan.kernels)
    path = tmp_path / "t.jsonl"
    TuningStore(path).append(store_key(first.program, model, first.dtype, first.search.dims), other, 1.0)
    monkeypatch.setattr(gpu, "gpu_name", lambda: model)
    used = kfuse.compile(script, tuned=path)
    assert used.from_store and used.plan.kernels == other.kernels
    another = kfuse.compile(script.replace("2.0 * exp(w)", "3.0 * exp(w)"), tuned=path)
    assert not another.from_store                   # another expression is another program


def test_a_broadcast_vector_alone_is_refused_not_a_crash():
    """``x[:, None]`` with no matrix and no ``w[None, :]`` has no column size: a clean error at the
    user's place, in a script and in a jitted function (it was a StopIteration in synth.py)."""
    with pytest.raises(ScriptError, match=r"v\[:, None\] alone has one size"):
        kfuse.compile("vector x; matrix M; input x; M = x[:, None] * 2.0; return M;")

    def f(A, x):
        return x[None, :] + 1.0
    with pytest.raises(TraceError, match=r"v\[None, :\] alone has one size") as info:
        kfuse.jit(f).compile(np.ones((5, 5), np.float32), np.ones(5, np.float32))
    assert "test_elementwise.py" in str(info.value)

    def g(x, y):
        return x[:, None] * y[None, :]                  # an outer product: sized
    assert kfuse.jit(g).compile(np.ones(5, np.float32), np.ones(7, np.float32)).kernels
