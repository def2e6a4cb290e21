"""Trust audit (issue 60) on the CPU: expressions that share operands are walked as DAGs, each
distinct node once (findings 4 and 5: ``a = a * a`` repeated took time and C text that doubled
with every step), and arguments are checked before tracing or planning (findings 11 and 15: a
``KfuseError`` or ``TraceError`` naming what is wrong, never a bare ``TypeError`` or a silent
truncation).  Generated C is built with nvcc and, where it is plain C++, run on the host against
the expression written out in full."""
from __future__ import annotations

import json
import re
import signal
import subprocess
from contextlib import contextmanager

import numpy as np
import pytest

import kfuse
from kfuse.jit import loops as loops
from kfuse.jit.decorator import array_facts
from kfuse.errors import KfuseError
from kfuse.frontend.calls import _computed, _leaves
from kfuse.codegen.loop import cexpr, scalars
from kfuse.codegen.loop.cexpr import c_expr, c_shared
from kfuse.codegen.loop.control import control_source
from kfuse.codegen.loop.scalars import ScalarCode
from kfuse.ir.loop import LEAVES
from kfuse.runtime import csr

from test_nvcc import nvcc_compile

STEPS = 60                   # squarings: 2^60 paths through the expression, 61 distinct nodes
X = np.zeros(64, np.float32)


@contextmanager
def within(seconds: float):
    """Fail (not hang) where the body takes longer than ``seconds``: the walks this file checks
    took time exponential in the steps before they were DAG walks."""
    def expired(signum, frame):
        raise TimeoutError(f"took longer than {seconds} s: a walk exponential in the shared steps?")
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def squared(a, steps: int = STEPS):
    for _ in range(steps):
        a = a * a
    return a


def squarings(x, y):
    return squared(x @ y)


# -- finding 4: a jitted function's shared scalar arithmetic ----------------------------------------
def test_returned_shared_squarings_trace_and_lower_in_linear_time():
    """``a = x @ y`` then ``a = a * a`` 60 times, returned: traced, lowered, its leaves found
    (one: the dot) and its device tail built from 61 distinct nodes, in well under a second."""
    f = kfuse.jit(squarings, calibration=False)
    with within(20):
        entry = f._entry((X, X))
        low = entry.lowered
        assert low.returns == [("expr", low.returns[0][1])] and low.outputs == ["s1"]
        (leaf,) = _leaves(low.returns[0][1])
        assert leaf.kind == "dot" and _computed(low.returns[0][1])
        tail = ScalarCode.traced(np.float32, [low.returns[0][1]], low.leaves)
        src = tail.source()
    assert tail.reads == (("out", 0),)
    assert src.count("const real t") == STEPS - 1 and len(src) < 10_000      # linear, not 2^60


def test_leaves_are_distinct_and_in_order():
    def f(x, y, z):
        d, e = x @ y, x @ z
        return d * e + d / e - d
    low = kfuse.jit(f, calibration=False).trace(X, X, X)
    got = _leaves(low.returns[0][1])
    assert [leaf.kind for leaf in got] == ["dot", "dot"]        # d and e once each, d first
    assert [low.leaves[id(leaf)] for leaf in got] == [("out", 0), ("out", 1)]


def test_returned_shared_squarings_evaluate_once_per_node():
    """The framework path (``_Entry._scalar``, NumPy standing in) computes each shared node once:
    60 squarings of 1 finish at once, and 3 squarings of 2 give 2^8."""
    f = kfuse.jit(squarings, calibration=False)
    with within(20):
        entry = f._entry((X, X))
        got = entry.package((np.array(1.0, np.float32),), (X, X))
    assert got.dtype == np.float32 and got == 1.0
    short = kfuse.jit(lambda x, y: squared(x @ y, 3), calibration=False)._entry((X, X))
    assert short.package((np.array(2.0, np.float32),), (X, X)) == 256.0


def test_shared_squarings_as_a_coefficient_are_named_once_each():
    """The chain scaling a matrix-vector product: each squaring read twice a named scalar
    statement, the last (read once) written into the call; the coefficient found computed
    (``_computed``: the product is no gemv with it as alpha) without walking 2^60 paths."""
    Asq = np.zeros((64, 64), np.float32)
    f = kfuse.jit(lambda A, x, y: squarings(x, y) * (A @ x), calibration=False)
    with within(20):
        script = f.trace(Asq, X, X).script
    squares = re.findall(r"^s(\d+) = s(\d+) \* s(\d+);", script, re.MULTILINE)
    assert len(squares) == STEPS - 1 and all(int(a) == int(b) + 1 and b == c for a, b, c in squares)
    last = squares[-1][0]
    assert script.count("dot(") == 1 and "gemv(A, x)" in script and f"scal(s{last} * s{last}, v" in script


# -- finding 5: a while loop's condition with shared terms ----------------------------------------
def state_specs():
    v, z = np.zeros(37, np.float32), np.zeros((), np.float32)
    return loops.state_specs([np.zeros((37, 37), np.float32), z, v, v, v, z], "while_loop")[0]


def _squared_condition(steps: int = STEPS):
    def cond(s):
        a = s[5]
        for _ in range(steps):
            a = a * a
        return (a > 1e-6 * s[1]) & ~(a > 1e30)
    return loops._predicate(cond, state_specs(), tuple)[0]


def _first_small_chains_are_short():
    """16 squarings first (2.6 MB of C written as a tree, in half a second): a quick failure
    where the C doubles with each step, before 60 steps would exhaust the memory."""
    pred = _squared_condition(16)
    assert len(control_source("float32", (), pred)) < 10_000 and len(c_expr(pred)) < 4_000


def test_condition_with_shared_squarings_is_linear_c():
    """60 squarings in a while loop's cond: the loop module declares each shared one once per
    kernel that checks the condition (kf_loop_first, kf_loop_next), and ``c_expr`` (the merged
    and persistent kernels' text of it) stays linear too."""
    _first_small_chains_are_short()
    pred = _squared_condition()
    with within(20):
        src = control_source("float32", (), pred)
        text = c_expr(pred)
    assert src.count("const real t") == 2 * STEPS and len(src) < 30_000
    assert len(text) < 10_000 and text.startswith("[&]() { const real t0 = ((*p5) * (*p5));")
    first = src.split("kf_loop_first(", 1)[1].split("\n}\n", 1)[0]
    assert first.index(f"const real t{STEPS - 1} = ") < first.index("int holds = ")
    assert c_expr(_squared_condition(0)) == "((((*p5) > (cst[0] * (*p1))) && (!((*p5) > cst[1]))))"[1:-1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_condition_with_shared_squarings_builds_with_nvcc(dtype, nvcc, tmp_path):
    """The loop module of the 60 squarings, relocatable as NVRTC builds it (graph handles) and
    plain, with warnings as errors; and ``c_expr``'s lambda inside a kernel."""
    _first_small_chains_are_short()
    pred = _squared_condition()
    src = control_source(dtype, (), pred)
    cu = tmp_path / "loop_rdc.cu"
    cu.write_text(src)
    done = subprocess.run([nvcc, "-arch=sm_90", "-rdc=true", "-cubin", "-std=c++17", "-Werror", "all-warnings",
                           "-o", str(tmp_path / "loop_rdc.cubin"), str(cu)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    nvcc_compile(nvcc, control_source(dtype, (), pred, conditional=False), tmp_path, f"loop_plain_{dtype}")
    real = {"float32": "float", "float64": "double"}[dtype]
    kernel = (f"typedef {real} real;\n"
              'extern "C" __global__ void k(int* o, const real* __restrict__ p1, const real* __restrict__ p5, '
              f"const real* __restrict__ cst) {{\n    *o = {c_expr(pred)};\n}}\n")
    nvcc_compile(nvcc, kernel, tmp_path, f"lambda_{dtype}")


def _tree(e: tuple) -> str:
    """The C text of ``e`` written out in full (the expression as c_expr wrote it before)."""
    if e[0] in LEAVES:
        return cexpr.c_leaf(e)
    return cexpr.c_op(e[0], [_tree(a) for a in e[1:]])


def test_shared_c_computes_what_the_full_text_computes(nvcc, tmp_path):
    """Semantics kept: a condition and an arithmetic tail sharing operands (comparisons shared
    too), built for the host and run on many inputs -- the full text, ``c_expr``'s lambda and
    ``c_shared``'s declarations give the same bits."""
    a = ("leaf", 0)
    for k in range(5):
        a = ("+", ("*", a, a), ("/", ("sqrt", ("abs", a)), ("const", k % 2)))
    big = (">", a, ("const", 1))
    pred = ("or", ("and", big, ("not", ("<", ("neg", a), ("num", -2.5)))), ("and", ("not", big), big))
    tail = ("-", ("*", a, ("num", 0.5)), ("/", a, ("const", 0)))
    lines = ["#include <cmath>", "#include <cstdio>", "#include <cstring>", "using std::sqrt; using std::fabs;",
             "typedef double real;"]
    for name, e, kind in (("pred", pred, "int"), ("tail", tail, "real")):
        decls, (text,) = c_shared([e])
        assert decls and "const bool t" in "".join(decls) if e is pred else decls
        lines += [f"{kind} {name}_tree(const real* p0, const real* cst) {{ return {_tree(e)}; }}",
                  f"{kind} {name}_lambda(const real* p0, const real* cst) {{ return {c_expr(e)}; }}",
                  f"{kind} {name}_decls(const real* p0, const real* cst) {{ {' '.join(decls)} return {text}; }}"]
    lines += ["int main() {",
              "    const real xs[] = {0.0, 0.3, -0.7, 1.0, 1.2, -2.0, 3.5, 1e-3};",
              "    const real cs[][2] = {{0.5, 2.0}, {3.0, 0.25}, {-1.0, 1e6}};",
              "    int bad = 0;",
              "    for (real x : xs) for (auto& c : cs) {",
              "        int p = pred_tree(&x, c);",
              "        bad += p != pred_lambda(&x, c) || p != pred_decls(&x, c);",
              "        real t = tail_tree(&x, c), l = tail_lambda(&x, c), d = tail_decls(&x, c);",
              "        bad += memcmp(&t, &l, sizeof t) != 0 || memcmp(&t, &d, sizeof t) != 0;",
              "    }",
              '    printf("%d\\n", bad);',
              "    return 0;",
              "}"]
    cu = tmp_path / "host.cu"
    cu.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "host"
    done = subprocess.run([nvcc, "-std=c++17", "-Werror", "all-warnings", "-o", str(exe), str(cu)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "0", run.stdout + run.stderr


def test_traced_tail_expression_keeps_shared_tuples():
    """``scalars.expression`` maps each distinct traced node to one tuple (the tail's C stays
    shared): the chain's 61 nodes, not 2^60 visits."""
    reads: list = []
    with within(20):
        low = kfuse.jit(squarings, calibration=False).trace(X, X)
        e = scalars.expression(low.returns[0][1], low.leaves, lambda place: place, reads)
    assert reads == [("out", 0)] and e[1] is e[2]


# -- finding 11: compile's and jit's options -------------------------------------------------------
DOT = "vector x, y; scalar s, a; input x, y, a; s = dot(x, y); return s;"


@pytest.mark.parametrize("option, message", [
    ({"tuned": 5}, "tuned is True .* False .* or the path of a tuning store, got int 5"),
    ({"tuned": None}, "tuned is True"),
    ({"tuned": ""}, "tuned is True"),
    ({"device_scalars": 5}, "device_scalars names scalar inputs .* got int 5"),
    ({"device_scalars": [5]}, "device_scalars names scalar inputs"),
    ({"name": 5}, "name names the program: a str or None, got int 5"),
])
def test_compile_options_are_checked(option, message):
    with pytest.raises(KfuseError, match=message):
        kfuse.compile(DOT, calibration=False, **option)


def test_good_options_still_compile(tmp_path):
    prog = kfuse.compile(DOT, calibration=False, tuned=tmp_path / "store.jsonl", device_scalars="a", name="d")
    assert prog is not None
    assert kfuse.compile(DOT, calibration=False, tuned=str(tmp_path / "s"), device_scalars=("a",)) is not None


def test_jit_tuned_is_checked_at_decoration():
    with pytest.raises(KfuseError, match="tuned is True .* got str ''"):
        kfuse.jit(lambda x: x, tuned="")
    with pytest.raises(KfuseError, match="got int 5"):
        kfuse.jit(tuned=5)(lambda x: x)
    assert kfuse.jit(lambda x: x @ x, tuned=False) is not None


# -- finding 15: argument checks at trace time --------------------------------------------------------
class Duck:
    """A duck-typed array: a shape and a dtype, nothing else."""

    def __init__(self, shape, dtype=np.float32):
        self.shape, self.dtype = shape, dtype


def test_a_grid_of_too_many_entries_is_refused():
    with pytest.raises(kfuse.TraceError, match="about 2\\^50 entries, at most 2\\^48"):
        array_facts(Duck((2 ** 17, 2 ** 17, 2 ** 16)), "argument g")
    with pytest.raises(kfuse.TraceError, match="argument g of .*about 2\\^50 entries") as e:
        kfuse.jit(lambda g: g + g).trace(Duck((2 ** 17, 2 ** 17, 2 ** 16)))
    assert "test_trust_walks.py" in str(e.value)
    assert array_facts(Duck((2 ** 16, 2 ** 16, 2 ** 16)), "g")[0] == (2 ** 16,) * 3    # 2^48: allowed


@pytest.mark.parametrize("duck", [Duck((5.5,)), Duck((np.float64(5.0),)), Duck((True,)), Duck(("5",)),
                                  Duck((5,), None)], ids=["float", "numpy-float", "bool", "str", "no-dtype"])
def test_sizes_must_be_integers_and_the_dtype_given(duck):
    with pytest.raises(kfuse.TraceError, match="is not an array's"):
        array_facts(duck, "argument x")
    with pytest.raises(kfuse.TraceError, match="argument x of <lambda>: its shape"):
        kfuse.jit(lambda x: x + x).trace(duck)


def test_numpy_integer_sizes_are_sizes():
    assert array_facts(Duck((np.int64(5), np.int32(3))), "x") == ((5, 3), np.dtype(np.float32))


@pytest.mark.parametrize("shape", [(True, 2), (2, True), (2.0, 2), (0, 2), (2,), "ab", None])
def test_csr_shapes_must_be_two_positive_integers(shape):
    c = kfuse.CSR(np.zeros(3, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32), shape)
    f = kfuse.jit(lambda A, x: A @ x)
    with pytest.raises(kfuse.TraceError, match="shape is \\(rows, columns\\), two positive integers") as e:
        f.trace(c, np.zeros(2, np.float32))
    assert "test_trust_walks.py" in str(e.value)
    assert csr.shape_of(shape) is None          # the rule binding applies too (adapt_csr)


def test_a_good_csr_shape_traces():
    assert csr.shape_of((np.int64(2), 3)) == (2, 3) and csr.shape_of([2, 3]) == (2, 3)
    c = kfuse.CSR(np.zeros(3, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32), (2, 3))
    assert "csr A;" in kfuse.jit(lambda A, x: A @ x).trace(c, np.zeros(3, np.float32)).script


def test_a_forged_tuning_record_that_breaks_the_fusion_rules_is_ignored(tmp_path, monkeypatch, caplog):
    """Issue 60, finding 1: a record (with a valid checksum) putting a dot and the axpy that reads
    its result in one kernel would read the scalar before it is reduced; the planner's rules
    refuse it, so the store's plan is ignored with a warning and the planner's is used."""
    import logging

    import kfuse.runtime.gpu as gpu
    from kfuse.tuning.store import TuningStore, store_key
    script = "vector x, y, z; scalar a; input x, y; a = dot(x, y); z = axpy(a, x, y); return z;"
    model = "NVIDIA H100 80GB HBM3"
    planned = kfuse.compile(script, tuned=False)
    assert len(planned.plan.kernels) == 2
    forged = [{"name": "k0_dot_axpy", "iters": 0, "ipb": 8, "loop": "i", "unroll": 1, "span": 1, "stores": [2, 3],
               "calls": [{"call": 0, "variant": "quad", "macros": {}}, {"call": 1, "variant": "quad", "macros": {}}]}]
    path = tmp_path / "t.jsonl"
    store = TuningStore(path)
    store.append(store_key(planned.program, model, planned.dtype, planned.search.dims), planned.plan, 1.0)
    lines = path.read_text().splitlines()
    rec = json.loads(lines[-1])
    rec["plan"] = forged
    from kfuse.tuning.store import _digest
    rec["sha256"] = _digest(rec)
    path.write_text("\n".join(lines[:-1] + [json.dumps(rec)]) + "\n")
    monkeypatch.setattr(gpu, "gpu_name", lambda: model)
    with caplog.at_level(logging.WARNING, logger="kfuse"):
        used = kfuse.compile(script, tuned=path)
    assert not used.from_store and len(used.plan.kernels) == 2
    assert "breaks the fusion rules" in caplog.text


@pytest.mark.parametrize("lower, upper", [(0, 2 ** 64 + 5), (2 ** 1024, 2 ** 1024 + 3), (-(2 ** 60), 0)])
def test_fori_loop_bounds_out_of_range_are_a_clean_error(lower, upper):
    """Issue 60, finding 8: 2^64 + 5 steps wrapped to 5 (a persistent loop's c_longlong) and a
    lower bound of 2^1024 was an OverflowError (the counter is passed as a double): both are a
    TraceError at the caller's line, before anything is traced or launched."""
    x = np.zeros(4, np.float32)
    with pytest.raises(kfuse.TraceError, match="out of range") as e:
        kfuse.fori_loop(lower, upper, lambda i, s: s, (x,))
    assert e.value.file == __file__


@pytest.mark.parametrize("lower, upper, name", [(0, 2 ** 24 + 5, "upper"), (-(2 ** 24) - 1, 0, "lower"),
                                                (2 ** 30, 2 ** 30 + 3, "lower")])
def test_fori_loop_bounds_past_a_float32_counter_are_a_clean_error(lower, upper, name):
    """Issue 60, finding 8 (float32): the loop's counter has the state's dtype, and a float32 one
    stops counting at 2^24 (2^24 + 1 rounds back to 2^24): the body's i went wrong.  Bounds beyond
    2^24 in magnitude are a TraceError at the caller's line for a float32 state, nothing traced or
    launched; a float64 state takes them (its counter is exact to 2^53)."""
    x = np.zeros(4, np.float32)
    with pytest.raises(kfuse.TraceError, match=f"fori_loop: {name} = -?\\d+ is out of range for a float32 loop") as e:
        kfuse.fori_loop(lower, upper, lambda i, s: s, (x,))
    assert e.value.file == __file__ and "2^24" in str(e.value)
    body = loops.traced_body
    traced = []
    loops.traced_body = lambda *a: traced.append(a) or body(*a)
    try:
        with pytest.raises(kfuse.TraceError, match="float32 loop"):
            kfuse.fori_loop(lower, upper, lambda i, s: s, (x,), unroll=4)
    finally:
        loops.traced_body = body
    assert not traced                                        # refused before anything is traced
    try:
        kfuse.fori_loop(lower, upper, lambda i, s: s, (np.zeros(4, np.float64),))
    except KfuseError as e:         # refused later (NumPy arrays, or no CuPy here), not for its bounds
        assert "out of range" not in str(e)
