"""Device loops on the CPU: what is refused while tracing a body or a condition (each error at the
user's line, never a traceback), how a body's state maps onto its program, and the loop control
module built by nvcc (relocatable, as NVRTC builds it)."""
import ctypes
import subprocess
import sys

import numpy as np
import pytest

import kfuse
from kfuse.jit import loops
from kfuse.codegen.loop.cexpr import c_expr
from kfuse.codegen.loop.control import control_source

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples" / "solvers"))
N = 37
A = np.zeros((N, N), np.float32)
V = np.zeros(N, np.float32)
Z = np.zeros((), np.float32)


def _cg_state():
    return (A, Z, V, V, V, Z)


def state_specs():
    return loops.state_specs(list(_cg_state()), "while_loop")[0]


def test_cg_body_maps_its_state_onto_one_program():
    import cg
    body, leaves = loops.traced_body(cg.cg_body, False, _cg_state(), "while_loop")
    assert body.sources == [("keep",), ("keep",), ("out", 0), ("out", 1), ("out", 2), ("out", 3)]
    assert not body.tails and not body.hidden and not body.indexed
    assert len(leaves) == 6
    again, _ = loops.traced_body(cg.cg_body, False, _cg_state(), "while_loop")
    assert again is body            # traced once per signature


def test_entries_passed_on_computed_and_the_counter():
    def body(i, s):
        x, y, c = s
        return y, x + i * y, (x @ y) / 2 + kfuse.sqrt(c * c)
    b, _ = loops.traced_body(body, True, (V, V, 1.5), "fori_loop")
    assert b.sources[0] == ("copy", ("leaf", 1)) and b.sources[2] == ("tail", 0)
    assert b.indexed and b.hidden == [1]
    assert ("out", 1) in b.tail_reads and ("leaf", 2) in b.tail_reads


def test_wrapper_bodies_of_different_functions_are_different_programs():
    def make(f):
        return lambda i, s: f(s)
    b1, _ = loops.traced_body(make(lambda s: (s[0] + s[0],)), True, (V,), "fori_loop")
    b2, _ = loops.traced_body(make(lambda s: (s[0] - s[0] * 2,)), True, (V,), "fori_loop")
    assert b1 is not b2 and b1.lowered.script != b2.lowered.script


@pytest.mark.parametrize("cond, message", [
    (lambda s: s[2] > 1, "vector state entry"),
    (lambda s: s[5], "not a comparison"),
    (lambda s: True, "Python bool"),
    (lambda s: (s[5] > 1) and (s[5] < 2), "Python's if, and, or"),
    (lambda s: s[5] > "x", "not with a str"),
    (lambda s: (s[5] > 1) & 3, "combines comparisons"),
    (lambda s: s[9] > 1, "IndexError while tracing"),
])
def test_bad_conditions_are_trace_errors_at_the_users_line(cond, message):
    with pytest.raises(kfuse.TraceError, match=message) as e:
        loops._predicate(cond, state_specs(), tuple)
    assert "test_loops.py" in str(e.value)


def test_condition_numbers_are_passed_not_compiled():
    tol = 1e-6
    e1, c1 = loops._predicate(lambda s: s[5] > tol * tol * s[1], state_specs(), tuple)
    tol = 1e-3
    e2, c2 = loops._predicate(lambda s: s[5] > tol * tol * s[1], state_specs(), tuple)
    assert e1 == e2 and c1 != c2
    assert "cst[0]" in c_expr(e1)


def _shrinks(s):
    return s[:5]


def _reshapes(s):
    A, bb, x, r, p, rr = s
    return A, bb, x, r, p, x


def _branches(s):
    A, bb, x, r, p, rr = s
    if rr > 0:
        x = x + p
    return A, bb, x, r, p, rr


@pytest.mark.parametrize("body, message", [
    (_shrinks, "returns 5 values; the state has 6"),
    (_reshapes, "returns a vector of shape .* as state entry 5, which came in as a scalar"),
    (_branches, "a comparison of a traced value"),
])
def test_bad_bodies_are_trace_errors_at_the_users_line(body, message):
    with pytest.raises(kfuse.TraceError, match=message) as e:
        kfuse.while_loop(lambda s: s[5] > 0, body, _cg_state())
    assert "test_loops.py" in str(e.value)


def test_bad_states_and_bounds():
    with pytest.raises(kfuse.TraceError, match="mixed dtypes"):
        kfuse.fori_loop(0, 3, lambda i, s: s, (V, V.astype(np.float64)))
    with pytest.raises(kfuse.TraceError, match="empty"):
        kfuse.fori_loop(0, 3, lambda i, s: s, ())
    with pytest.raises(kfuse.TraceError, match="no vector or matrix"):
        kfuse.fori_loop(0, 3, lambda i, s: s, (1.0, Z))
    with pytest.raises(kfuse.TraceError, match="upper must be an int"):
        kfuse.fori_loop(0, 2.5, lambda i, s: s, (V,))
    with pytest.raises(kfuse.TraceError, match="state entry 1 is a str"):
        kfuse.fori_loop(0, 3, lambda i, s: s, (V, "x"))
    with pytest.raises(kfuse.KfuseError, match="max_iterations"):
        kfuse.while_loop(lambda s: s[0] > 0, lambda s: s, (Z, V), max_iterations=-1)

    class Odd:                  # a duck-typed array whose shape is no shape
        shape, dtype = ("n",), np.float32
    with pytest.raises(kfuse.TraceError, match="state entry 1: its shape .* is not an array's"):
        kfuse.fori_loop(0, 3, lambda i, s: s, (V, Odd()))
    Odd.shape = (2 ** 50,)      # the scripts' bound on a size, as for a jitted function's arguments
    with pytest.raises(kfuse.TraceError, match="state entry 1 has shape .*: a size is from 0 to 2\\^48"):
        kfuse.fori_loop(0, 3, lambda i, s: s, (V, Odd()))
    with pytest.raises(kfuse.TraceError, match="state entry 0 has rank 4"):
        kfuse.fori_loop(0, 3, lambda i, s: s, (np.zeros((2, 2, 2, 2), np.float32),))
    with pytest.raises(kfuse.TraceError, match="state entry 0 has dtype int32"):
        kfuse.fori_loop(0, 3, lambda i, s: s, (np.zeros(4, np.int32),))

    @kfuse.jit
    def inside(x):
        return kfuse.fori_loop(0, 2, lambda i, s: s, (x,))
    with pytest.raises(kfuse.TraceError, match="runs from Python"):
        inside.trace(V)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_control_module_builds_with_nvcc(dtype, nvcc, tmp_path):
    pred = ("and", (">", ("leaf", 5), ("*", ("const", 0), ("leaf", 1))), ("not", ("<", ("leaf", 5), ("const", 1))))
    tails = [("+", ("/", ("leaf", 0), ("num", 2.0)), ("sqrt", ("abs", ("leaf", 1))))]
    for k, (src, rdc) in enumerate([(control_source(dtype, tails, pred, clears=2, saved=3, carried=3), True),
                                    (control_source(dtype, tails, pred, conditional=False), False),
                                    (control_source(dtype, tails, clears=1, carried=2), False)]):
        cu = tmp_path / f"control{k}.cu"
        cu.write_text(src)
        cmd = [nvcc, "-arch=sm_90", "-cubin", "-o", str(tmp_path / f"control{k}.cubin"), str(cu)]
        if rdc:
            cmd.insert(2, "-rdc=true")
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert ("cudaGraphSetConditional" in src) == rdc
    assert "kf_loop_first" in control_source(dtype, (), pred) and "kf_scalars" not in control_source(dtype, (), pred)
    # a run's ends, one launch each: the predicate's two numbers set by the start, each carried
    # entry an argument triple of both, the start's clears
    src = control_source(dtype, tails, pred, clears=2, carried=3)
    start = src.split("kf_loop_start(", 1)[1].split("\n}\n", 1)[0]
    assert "cst[1] = c1;" in start and "cst[2]" not in start and "q1[e] = v1;" in start and "a2[e] = b2[e];" in start
    assert "a2[e] = b2[e];" in src.split("kf_loop_copies(", 1)[1] and "kf_loop_start" not in control_source(dtype, tails, pred)


def test_long_expressions_need_no_recursion():
    e = ("leaf", 0)
    for _ in range(5000):
        e = ("+", e, ("num", 1.0))
    assert c_expr(e).count("+") == 5000


def _persistent_source(body, n, dtype):
    """The persistent kernel's module of a body's program at size n, with the argument struct
    types read from the device functions' own parameter structs (the runtime takes them from
    the bound launches; the static_assert in the kernel checks that both agree)."""
    from kfuse.codegen.loop import WRITER
    from kfuse.ir.loop import PersistentShape
    c = body.compiled
    r = c.resolve((), {d: n for d in range(len(c.program.dims))})
    kernels = _kernels_of(r, dtype)
    m = len(kernels)
    shape = PersistentShape(tuple(kernels), ((m - 1, True), (0, False), (m + 1, True)), 1,
                            (("+", ("leaf", 0), ("num", 1.0)),), 1, True, True, (">", ("leaf", 1), ("const", 0)), 2)
    return r.artifact.persistent_source(WRITER.persistent(shape, np.dtype(dtype))), r


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("solver,n", [("cg", 37), ("cg", 1000), ("bicgstab", 300), ("bicg", 4096)])
def test_persistent_kernel_builds_with_nvcc(solver, n, dtype, nvcc, tmp_path):
    """A body's kernels as device functions in one persistent kernel, with every kind of phase
    (clears early, late and at the end, a tail with a copy, scalar arithmetic and the counter)."""
    from test_nvcc import nvcc_compile
    mod = __import__(solver)
    Ah, vh, zh = np.zeros((n, n), dtype), np.zeros(n, dtype), np.zeros((), dtype)
    state = {"cg": (Ah, zh, vh, vh, vh, zh), "bicg": (Ah, zh, vh, vh, vh, vh, vh, zh, zh),
             "bicgstab": (Ah, zh, vh, vh, vh, vh, zh, zh)}[solver]
    body, _ = loops.traced_body(getattr(mod, f"{solver}_body"), False, state, "while_loop")
    src, r = _persistent_source(body, n, dtype)
    for k in r.kernels:
        assert f"{k.launch.kernel}_dev(s.k" in src and "__global__" not in k.device_function()[0]
        assert "blockIdx" not in k.device_function()[0] and "__syncthreads" not in k.device_function()[0]
    assert src.count("kf_grid_sync(kf_bar);") == len(r.kernels) + 2
    nvcc_compile(nvcc, src, tmp_path, f"persistent_{solver}_{n}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("solver,n", [("cg", 37), ("bicgstab", 1000)])
def test_merged_kernel_builds_with_nvcc(solver, n, dtype, nvcc, tmp_path):
    """A step's kernels as phases of one block (codegen/loop/merged.py), one of them over two blocks in
    turn, with the step's small work taken in: two clears, a copy, scalar arithmetic sharing an
    operation, the counter; and with a while loop's step end (condition, count, saves)."""
    from test_nvcc import nvcc_compile
    from kfuse.codegen.loop import merged
    from kfuse.ir.loop import MergedShape
    mod = __import__(solver)
    Ah, vh, zh = np.zeros((n, n), dtype), np.zeros(n, dtype), np.zeros((), dtype)
    state = {"cg": (Ah, zh, vh, vh, vh, zh), "bicgstab": (Ah, zh, vh, vh, vh, vh, zh, zh)}[solver]
    body, _ = loops.traced_body(getattr(mod, f"{solver}_body"), False, state, "while_loop")
    _, r = _persistent_source(body, n, dtype)
    kernels = tuple(k for k in _kernels_of(r, dtype) if k.name != r.kernels[0].launch.kernel)
    half = ("*", ("leaf", 0), ("leaf", 1))
    shape = MergedShape(kernels, (1,) * (len(kernels) - 1) + (2,), clears=2, copies=1,
                        tails=(("+", half, half), ("sqrt", half)), tail_reads=2, indexed=True,
                        groups=(4,) + (1,) * (len(kernels) - 1), block=4 * kernels[0].threads,
                        sizes=tuple(tuple((i, n if t is ctypes.c_longlong else 1) for i, t in enumerate(k.args[:-1])
                                          if t in (ctypes.c_longlong, ctypes.c_int)) for k in kernels))
    text = merged.kernel_text(shape, np.dtype(dtype), "kf_merged1")
    assert text.count("__syncthreads();") == len(kernels) + 1 and "const real t0 = " in text
    assert "for (long long b = 0; b < 2; ++b)" in text and "kf_loop_next" not in text
    # the sizes compiled in: each phase runs on a copy of its arguments with them set
    assert f"{kernels[0].name}_dev(kf_k0, threadIdx.x / {kernels[0].threads}, 4, kf_smem);" in text
    assert f") = {n}LL;" in text and text.count("compiled in") == len(kernels)
    # a while loop's step end taken in: its condition over two pointers and a number, two saves
    pred = (">", ("leaf", 1), ("*", ("const", 0), ("leaf", 0)))
    ends = MergedShape(kernels, (1,) * len(kernels), clears=1, pred=pred, pred_reads=2, consts=True, saved=2)
    text2 = merged.kernel_text(ends, np.dtype(dtype), "kf_merged2")
    assert "kf_loop_next" in text2 and "s.ctl[2 - s.odd] = go;" in text2 and "cst[0]" in text2
    # the step's first kernel (the gemv) as a wrapper launched early: it waits before anything else,
    # its sizes compiled in; the run ending the step lets it launch
    first = next(k for k in _kernels_of(r, dtype) if k.name == r.kernels[0].launch.kernel)
    head = merged.head_text(first, ((1, n), (len(first.args) - 2, 1)), "kf_head")
    body = head.split("{", 1)[1]
    assert body.index("kf_wait_prior();") < body.index(f"{first.name}_dev(kf_k, blockIdx.x, gridDim.x, kf_smem);")
    allowed = merged.kernel_text(MergedShape(kernels, (1,) * len(kernels), allow=True), np.dtype(dtype), "kf_merged3")
    assert allowed.index("kf_allow_next();") < allowed.index("// phase 0")
    src = r.artifact.persistent_source(text + "\n" + text2 + "\n" + head + "\n" + allowed)
    assert "#define __restrict__" in src       # no load through the non-coherent cache
    nvcc_compile(nvcc, src, tmp_path, f"merged_{solver}_{n}")


def test_merged_phases_compile_in_every_integer_argument_but_the_flip():
    """What a merged run compiles in (``merged.fixed``): sizes and counts as they are, the serial
    iterations shared out among the blocks side by side (rounded up), never a pointer, a number
    or kf_flip (set per call)."""
    from types import SimpleNamespace
    from kfuse.runtime import merged
    values = [ctypes.c_void_p(0), ctypes.c_longlong(1000), ctypes.c_float(2.5), ctypes.c_longlong(37),
              ctypes.c_int(10), ctypes.c_int(1)]
    launch = SimpleNamespace(args=SimpleNamespace(values=values))
    assert merged.fixed(launch) == ((1, 1000), (3, 37), (4, 10))
    assert merged.fixed(launch, 4) == ((1, 1000), (3, 37), (4, 3))


def test_merged_runs_are_consecutive_one_block_kernels():
    """runtime/merged.py: a run is consecutive kernels of at most MAX_GRID blocks, whole warps,
    no clusters, shared memory within a block's; the widest kernel sets the block, and the
    arithmetic and condition it takes in read no numbers passed by value."""
    from types import SimpleNamespace as NS
    from kfuse.ir.loop import Kernel, MergedShape
    from kfuse.runtime import merged

    def launch(grid, threads=64):
        return NS(grid=grid, threads=threads)

    def code(cluster=1, smem=0):
        return NS(launch=NS(cluster=cluster, smem_bytes_per_real=smem))
    L = [launch(40, 256), launch(1), launch(1), launch(1, 256), launch(3), launch(1), launch(1, 48), launch(1)]
    C = [code(), code(), code(), code(), code(), code(), code(), code(cluster=2)]
    assert merged.runs(L, C, 4) == [(1, 4), (5, 6)]
    assert merged.runs([launch(1)] * 2, [code(), code(smem=1 << 20)], 8) == [(0, 1)]
    k = (Kernel("a", 64, 0, ()), Kernel("b", 256, 0, ()))
    assert MergedShape(k, (1, 1)).threads == 256 and MergedShape(k, (1, 1), block=512).threads == 512
    assert MergedShape(k, (1, 1), groups=(4, 1)).side_by_side(0) == 4 and MergedShape(k, (1, 1)).side_by_side(0) == 1
    leaf, num = ("leaf", 0), ("num", 2.0)
    assert merged.foldable([("*", leaf, num)], (">", leaf, ("const", 0)))
    assert not merged.foldable([("*", leaf, ("const", 0))]) and not merged.foldable([("+", leaf, ("value", 1))])
    assert not merged.foldable([], (">", leaf, ("value", 0)))


def _kernels_of(r, dtype):
    """ir/loop.Kernel of each of a resolved program's kernels, the argument types read from
    its device function's parameter struct."""
    import ctypes
    import re
    from kfuse.ir.loop import Kernel
    real = ctypes.c_double if dtype == "float64" else ctypes.c_float
    ct = {"real*": ctypes.c_void_p, "const real*": ctypes.c_void_p, "long long": ctypes.c_longlong,
          "int": ctypes.c_int, "real": real}
    out = []
    for k in r.kernels:
        text, _ = k.device_function()
        members = re.search(r"struct \w+_args \{[^\n]*\n(.*?)\n\};", text, re.S).group(1)
        types = tuple(ct[m.strip().rstrip(";").rsplit(" ", 1)[0].strip()] for m in members.splitlines())
        out.append(Kernel(k.launch.kernel, k.launch.threads, k.launch.smem_bytes_per_real, types))
    return out


def test_clears_are_placed_between_their_uses():
    from kfuse.runtime.persistent import place_clears
    big = 1 << 30
    # used last in phase 0 of 3 phases: cleared in the last; used last in the last phase but first
    # in phase 1: cleared before, in phase 0; used in the last phase and accumulated in phase 0:
    # a phase of its own at the end
    assert place_clears([0, 2, 2], [2, 1, 0], 2) == [(2, True), (0, False), (3, True)]
    # never a late clear in phase 0 (the condition reads the next step's outputs there)
    assert place_clears([-1], [0], 0) == [(1, True)]
    assert place_clears([-1], [big], 0) == [(0, False)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_loop_step_is_priced_by_graph_nodes_and_merged_phases(dtype):
    """cost/queued.py: CG's step at n = 1024 is a gemv over many blocks and three one-block vector
    kernels (one merged run: 2 nodes, 3 phases); at 4096 its last kernel takes several blocks (3
    nodes, 2 phases).  The price is the bodies plus the terms, and far below the host launches'."""
    import cg
    from kfuse.cost.queued import H100, step_price
    for n, nodes, phases in ((1024, 2, 3), (4096, 3, 2)):
        A, v, s = np.zeros((n, n), dtype), np.zeros(n, dtype), np.zeros((), dtype)
        c0 = kfuse.jit(cg.cg_update).compile(A, v, v, v, s)
        c = c0.for_sizes({d.id: n for d in c0.program.dims})
        search = c.search
        step = step_price(search.model, c.kernels, search.dims, search.entries, search.itemsize)
        assert (step.nodes, step.phases) == (nodes, phases), step
        assert step.seconds == pytest.approx(step.bodies + nodes * H100.node + phases * H100.phase)
        assert 0 < step.bodies < step.seconds < c.plan.predicted


def test_state_checks_are_remembered_for_numbers_and_dense_arrays():
    """loops.state_specs answers a state of numbers and dense arrays seen before (same types, shapes and
    dtypes) without checking it again; anything else, and a state it refused, is checked each time."""
    from kfuse.jit import loops as KL
    KL._SPECS.clear()
    a, b = np.zeros(5, np.float32), np.zeros((5, 5), np.float32)
    first = KL.state_specs([a, b, 1.0], "fori_loop")
    assert len(KL._SPECS) == 1
    again = KL.state_specs([np.ones(5, np.float32), np.ones((5, 5), np.float32), 2.0], "fori_loop")
    assert again == first and len(KL._SPECS) == 1
    assert KL.state_specs([np.zeros(6, np.float32), b, 1.0], "fori_loop")[0][0].shape == (6,)
    for _ in range(2):          # refused each time, never remembered
        with pytest.raises(kfuse.TraceError, match="mixed dtypes"):
            KL.state_specs([a, b.astype(np.float64)], "fori_loop")
        with pytest.raises(kfuse.TraceError, match="bool"):
            KL.state_specs([a, True], "while_loop")
    assert len(KL._SPECS) == 2
    # a CSR matrix (its non-zeros are part of its spec) and other objects: not remembered
    assert KL._entry_key((np.zeros(3), np.zeros(2), np.zeros(2), (2, 2))) is None
    assert KL._entry_key(np.float32(1)) is None and KL._entry_key(True) is None


def test_explain_loop_shows_the_step_boundary_and_its_reasons():
    """Two CG steps as one program (loopsteps.py): the p update and the next A @ p are in
    different kernels for a reason the rules give (the gemv reads p along its columns, which
    other blocks make: a global barrier), and the plan of two steps costs twice one step's; a
    body of vector updates fuses across the boundary into one kernel for both steps."""
    import cg

    def body(i, s):
        A, x, r, p, rr = s
        return (A,) + cg.cg_update(A, x, r, p, rr)
    text = kfuse.explain_loop(body, (A, V, V, V, Z))
    assert text.startswith("one step: 4 kernel(s)") and "2 steps as one program: 8 kernel(s)" in text
    gemv = next(line for line in text.splitlines() if "-> c6 v8 = gemv(" in line)
    assert "not fused: same_nesting" in gemv and "with vector_on_strips:" in gemv and "along j" in gemv
    assert "global barrier" in gemv
    assert "v8 = gemv(state0, v7)" in text and "plan for body_x2" in text
    relax = kfuse.explain_loop(lambda i, s: (s[0] + 0.1 * s[1], 0.9 * s[1] - 0.01 * s[0]), (V, V))
    assert "2 steps as one program: 1 kernel(s)" in relax and "0.50x one step's" in relax
    assert "not fused" not in relax and relax.count("fused (kernel 0)") == 4
    with pytest.raises(kfuse.KfuseError, match="at least 2"):
        kfuse.explain_loop(body, (A, V, V, V, Z), unroll=1)


def test_unrolled_bodies_count_their_steps_and_check_unroll():
    """``fori_loop(..., unroll=U)``'s body is the user's applied U times, step lower + U j + u
    reading its own counter value; a bad ``unroll`` is refused before anything runs."""
    from kfuse.jit.loopsteps import unrolled
    b, _ = loops.traced_body(unrolled(lambda i, s: s + i * s, 2, 5), True, V, "fori_loop")
    script = b.lowered.script
    assert script.count("axpy(") + script.count("axpby(") + script.count("scal(") == 2, script
    assert "(2.0 * i) + 5.0" in script and "(2.0 * i) + 6.0" in script, script
    for bad in (0, -1, True, 2.0):
        with pytest.raises(kfuse.KfuseError, match="unroll must be an int of at least 1"):
            kfuse.fori_loop(0, 4, lambda i, s: s, (V,), unroll=bad)
