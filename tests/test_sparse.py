"""CSR matrices and the sparse mat-vec on the CPU: the library format's csr type and ``size``
field, scripts declaring csr matrices, the plan fusing a dot and an axpy into spmv's kernel, the
generated CUDA (nvcc compiles it), the row mapping chosen from row statistics, and the checks of
csr inputs that need no GPU."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import kfuse
from kfuse.errors import LaunchError, LibraryError, ScriptError
from kfuse.runtime import csr as csr_inputs

from test_library import META, dump_functions, load_error

CG_STEP = """csr A;
vector p, q, r;
scalar pq;
input A, p, r;
q = spmv(A, p);
pq = dot(p, q);
return q, pq;
"""

FUSED = """csr A[m, n];
vector x[n], y[m], z[m], w[m];
scalar a, s;
input A, x, z, a;
y = spmv(A, x);
w = axpy(a, y, z);
s = dot(y, w);
return w, s;
"""


def compiled(src: str, dtype: str = "float64", **kw):
    return kfuse.compile(src, dtype=dtype, calibration=False, tuned=False, **kw)


def groups(prog) -> list[list[str]]:
    return [sorted(kc.call.function.name for kc in k.spec.calls) for k in prog.kernels]


def test_spmv_is_loaded_with_a_csr_input_and_a_gathered_x(lib):
    (fn,) = lib.overloads("spmv")
    A, x, out = fn.params
    assert A.type == "csr" and A.index == ("i",) and A.gathered and not A.on_chip
    assert x.reach == "any" and x.index == () and x.size == ("A.cols",)
    assert out.index == ("i",) and out.on_chip
    assert lib.overloads("csrmv") == (fn,)


def test_a_script_declares_csr_matrices_and_spmv_ties_their_sizes():
    prog = compiled(FUSED).program
    A = next(v for v in prog.inputs if v.name == "A")
    assert A.type == "csr" and [prog.dim(d).name for d in A.dims] == ["m", "n", "A.nnz"]
    x = next(v for v in prog.inputs if v.name == "x")
    assert prog.dim(x.dims[0]).name == "n"


@pytest.mark.parametrize("src, words", [
    ("csr A;\nvector x, y;\ninput A, x;\ny = spmv(x, x);\nreturn y;\n", "must be a csr, x is a vector"),
    ("matrix A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n", "must be a csr, A is a matrix"),
    ("csr A[m, n];\nvector x[m], y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n", "declared sizes"),
    ("csr A[4];\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n", "a csr matrix has 2 sizes"),
    ("csr A;\nvector x, y;\ninput A, x;\ny = gemv(A, x);\nreturn y;\n", "must be a matrix, A is a csr"),
])
def test_script_errors_of_csr_values(src, words):
    with pytest.raises(ScriptError) as e:
        compiled(src)
    assert words in str(e.value)


def test_spmv_fuses_with_the_dot_of_its_result(nvcc, tmp_path):
    prog = compiled(CG_STEP)
    assert groups(prog) == [["dot", "spmv"]]
    assert "[spmv/rows]" in prog.describe()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("src", [CG_STEP, FUSED, "csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n"])
def test_generated_cuda_of_spmv_compiles(nvcc, tmp_path, dtype, src):
    prog = compiled(src, dtype)
    assert any("spmv" in g for g in groups(prog))
    text = prog.cuda_source
    assert "struct KfCsr" in text and "const KfCsr g_A{" in text and "spmv_rows(" in text
    cu = tmp_path / "k.cu"
    cu.write_text(text)
    subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(cu)], check=True,
                   capture_output=True)


def test_axpy_and_dot_of_spmv_result_share_its_kernel():
    prog = compiled(FUSED)
    assert ["axpy", "dot", "spmv"] in groups(prog), groups(prog)


def test_the_producer_of_x_runs_in_an_earlier_kernel():
    src = "csr A;\nvector x, u, y;\nscalar a;\ninput A, u, a;\nx = scal(a, u);\ny = spmv(A, x);\nreturn y;\n"
    prog = compiled(src)
    assert ["scal"] in groups(prog) and ["spmv"] in groups(prog)


def test_two_calls_reading_one_matrix_take_two_kernels_and_explain_says_why():
    """Each kernel sums a matrix's long rows before it for one call's vector (runtime/csr.py):
    A x and A z, which would share a kernel (horizontally), are refused with the reason, which A x
    and B z are not given."""
    src = "csr A;\nvector x, z, y, w;\ninput A, x, z;\ny = spmv(A, x);\nw = spmv(A, z);\nreturn y, w;\n"
    prog = compiled(src)
    assert groups(prog) == [["spmv"], ["spmv"]], groups(prog)
    assert "both read csr matrix A: its long rows are summed before the kernel, for one call" in prog.search.explain()
    two = compiled(src.replace("csr A;", "csr A, B;").replace("input A,", "input A, B,").replace("spmv(A, z)", "spmv(B, z)"))
    assert "both read csr matrix" not in two.search.explain()


def test_modules_without_csr_matrices_have_no_sparse_prelude():
    prog = compiled("vector x, y;\nscalar a;\ninput x, a;\ny = scal(a, x);\nreturn y;\n")
    assert "KfCsr" not in prog.cuda_source


def test_the_transfer_model_counts_a_csr_matrix_by_its_non_zeros():
    from kfuse.ir.program import entries
    prog = compiled(CG_STEP).program
    A = prog.inputs[0]
    rows, cols, nnz = A.dims
    assert entries(A, {rows: 1000, cols: 1000, nnz: 16000}) == 2 * 16000 + 1001


@pytest.mark.parametrize("rows, nnz, longest, lanes, long_row", [
    (1000, 1000, 1, 1, 0),           # one entry per row: a thread per row
    (1000, 4000, 9, 4, 0),
    (1000, 5600, 9, 4, 0),           # 5.6 a row: still groups of 4
    (1000, 5700, 12, 0, 0),          # 5.7 a row, nearer 8: streamed
    (1000, 16000, 40, 0, 0),
    (1000, 64000, 100, 0, 0),
    (1000, 5000, 100_000, 4, 256),   # one very long row: the whole instance sums it
    (100, 20000, 5000, 0, 1600),     # rows of 200 on average, one of 5000
])
def test_row_mapping_follows_the_row_statistics(rows, nnz, longest, lanes, long_row):
    assert csr_inputs.mapping(rows, nnz, longest) == (lanes, long_row)


def test_a_fixed_mapping_for_measurements_overrides_the_lanes_only(monkeypatch):
    """runtime.csr.LANES (benchmarks/sparse.py --sweep-lanes): every matrix takes those lanes, its
    long rows still found; a value the kernel does not take is a LaunchError."""
    monkeypatch.setattr(csr_inputs, "LANES", 16)
    assert csr_inputs.mapping(1000, 4000, 9) == (16, 0) and csr_inputs.mapping(1000, 5000, 100_000) == (16, 256)
    monkeypatch.setattr(csr_inputs, "LANES", 0)
    assert csr_inputs.mapping(1000, 1000, 1) == (0, 0)
    monkeypatch.setattr(csr_inputs, "LANES", 64)
    with pytest.raises(LaunchError, match="one of"):
        csr_inputs.mapping(1000, 4000, 9)


def test_short_rows_take_lanes_only_where_that_costs_less_than_streaming():
    """Rows of about 4 take groups of 4 lanes where their warps' lane-steps are at most the entries
    plus ``STREAM_ROW`` a row (what streaming costs); more, and they are streamed."""
    rows, nnz = 1000, 4000
    even = nnz + csr_inputs.STREAM_ROW * rows
    assert csr_inputs.mapping(rows, nnz, 9, slots=(0, 0, even, nnz)) == (4, 0)           # lanes 1, 2, 4; entries
    assert csr_inputs.mapping(rows, nnz, 9, slots=(0, 0, even + 1, nnz)) == (0, 0)
    assert csr_inputs.mapping(rows, 5000, 100_000, slots=(0, 0, 10 ** 6, 4000)) == (0, 256)  # long rows kept


def test_lane_slots_count_each_warps_longest_row():
    """A warp of 32 / lanes rows takes as many steps as its longest row needs, 32 lane-steps each;
    rows over LONG_MIN are left out (their pre-pass sums them), rows padded to whole warps."""
    def eff(d):           # entries over lane-steps
        *slots, kept = (int(v) for v in csr_inputs.lane_slots(np.asarray(d, np.int64), np))
        return {k: kept / n for k, n in zip(csr_inputs.SHORT_LANES, slots)}
    assert eff([4] * 8)[4] == 1.0 and eff([4] * 8)[1] == 32 / (32 * 4)        # 8 rows: one warp of 4 lanes
    assert eff([1] * 40)[1] == 40 / 64                                          # 2 warps, the second padded
    assert eff([2] * 15 + [6])[2] == 36 / (32 * 3)                              # one row of 6 holds the warp
    assert eff([4] * 7 + [100_000])[4] == 28 / 32                               # the long row left out


def test_a_few_long_rows_do_not_widen_every_row():
    """2053 rows of 1-4 entries and one of 120,000: the mean (about 60) would stream every row;
    the median keeps the short rows in narrow groups and sends the long one to the instance."""
    assert csr_inputs.mapping(2053, 125_000, 120_000, median=2) == (2, 256)
    assert csr_inputs.mapping(2053, 125_000, 120_000) == (0, 487)


def test_spmv_kernels_are_compiled_for_a_full_multiprocessor():
    """spmv's variant asks for 2048 resident threads: every kernel holding it is compiled for
    2048 / its threads blocks a multiprocessor (its loads wait on loads: more warps in flight)."""
    import re
    for src in (FUSED, CG_STEP):
        prog = compiled(src)
        for k in prog.kernels:
            names = {kc.call.function.name for kc in k.spec.calls}
            head = re.search(rf"__launch_bounds__\((\d+)(?:, (\d+))?\)[^\n]*\n{k.spec.name}\(", prog.cuda_source)
            assert head, k.spec.name
            threads, blocks = int(head[1]), int(head[2] or 1)
            assert (threads * blocks == 2048) == ("spmv" in names), (k.spec.name, head[0])


class _FakeScipy:
    """Stands for a scipy.sparse matrix (SciPy need not be installed for the message's test)."""
    shape = (3, 3)


_FakeScipy.__module__ = "scipy.sparse._csr"


def test_a_host_scipy_matrix_is_refused_with_the_way_to_the_gpu():
    with pytest.raises(LaunchError) as e:
        csr_inputs.parts(_FakeScipy(), "A")
    assert "host memory" in str(e.value) and "cupyx.scipy.sparse.csr_matrix(A)" in str(e.value)


def test_something_else_is_refused_as_no_csr_matrix():
    with pytest.raises(LaunchError) as e:
        csr_inputs.parts([1, 2, 3], "A")
    assert "expected a CSR matrix" in str(e.value)


def _spmv_fn(**changes) -> dict:
    f = {
        "name": "myspmv", "kind": "map",
        "params": [
            {"name": "A", "type": "csr", "dir": "in", "index": ["i"]},
            {"name": "x", "type": "vector", "dir": "in", "index": [], "reach": "any", "size": ["A.cols"]},
            {"name": "out", "type": "vector", "dir": "out", "index": ["i"]},
        ],
        "variant": [{
            "name": "rows", "source": ["sparse.cu", "fn.cu"], "threads": [128, 1],
            "locals": [{"name": "part", "element": "tile", "shape": [32, 4]},
                       {"name": "slab", "element": "tile", "shape": [4, 128]}],
            "routines": [
                {"name": "compute", "fn": "spmv_rows", "args": ["&A", "&x", "slab:w:any", "out:w:any"]},
                {"name": "store_out", "fn": "blas1_store", "args": ["out:r:lane", "&out"], "threads": [32, 1]},
            ],
        }],
    }
    for path, value in changes.items():
        where, key = path.rsplit(".", 1) if "." in path else ("", path)
        target = f
        for part in where.split(".") if where else ():
            target = target[int(part)] if part.isdigit() else target[part]
        target[key] = value
    return f


def _sparse_library(root, fn):
    from pathlib import Path
    root.mkdir(parents=True, exist_ok=True)
    (root / "library.toml").write_text(META)
    (root / "fn.toml").write_text(dump_functions([fn]))
    blas = Path(kfuse.__file__).parent / "blas"
    (root / "fn.cu").write_bytes((blas / "blas1.cu").read_bytes())
    (root / "sparse.cu").write_bytes((blas / "sparse.cu").read_bytes())
    return root


def test_a_library_of_its_own_may_declare_a_csr_function(tmp_path):
    lib = kfuse.load_library(_sparse_library(tmp_path / "lib", _spmv_fn(**{"variant.0.resident_threads": 512})))
    assert lib.overloads("myspmv")[0].params[1].size == ("A.cols",)
    assert lib.overloads("myspmv")[0].variants[0].resident_threads == 512


@pytest.mark.parametrize("changes, field, words", [
    ({"params.0.dir": "out"}, "index", "a csr matrix is an input"),
    ({"params.0.index": ["j"]}, "index", ""),
    ({"params.0.reach": "element"}, "reach", "read through its global view only"),
    ({"params.1.size": ["B.cols"]}, "size", "not a dimension of another parameter"),
    ({"params.1.size": ["A.nnz"]}, "size", "\"A.cols\""),
    ({"params.1.reach": "element"}, "size", "only inputs read beyond their element"),
    ({"params.1.index": ["i"]}, "size", "index = []"),
    ({"variant.0.resident_threads": 100}, "resident_threads", "a power of two from 64 to 2048"),
    ({"variant.0.resident_threads": 4096}, "resident_threads", "a power of two from 64 to 2048"),
    ({"variant.0.resident_threads": "all"}, "resident_threads", "expected int"),
])
def test_bad_csr_metadata_is_refused_at_load(tmp_path, changes, field, words):
    err = load_error(_sparse_library(tmp_path / "lib", _spmv_fn(**changes)))
    assert isinstance(err, LibraryError) and field in str(err) and words in str(err), str(err)


def _host_csr(m: int, n: int, index=np.int32, dtype=np.float64):
    """A kfuse.CSR of NumPy arrays: enough for tracing (only shapes and dtypes are read)."""
    indptr = np.arange(m + 1).astype(index)
    return kfuse.CSR(indptr, (np.arange(m) % n).astype(index), np.ones(m, dtype), (m, n))


def test_a_jitted_spmv_and_dot_traces_to_the_csr_program():
    @kfuse.jit
    def step(A, p, r):
        q = A @ p
        return q, p @ q, kfuse.lib.spmv(A, r) + 2.0 * r

    A, x = _host_csr(33, 33), np.ones(33)
    low = step.trace(A, x, x)
    assert low.script.splitlines()[1] == "csr A;"
    body = [line.split("#")[0].strip() for line in low.script.splitlines()[5:]]
    assert body == ["v1 = spmv(A, p);", "s2 = dot(p, v1);", "v3 = spmv(A, r);", "v4 = axpy(2.0, r, v3);",
                    "return v1, s2, v4;"]
    assert [v.type for v in low.program.inputs] == ["csr", "vector", "vector"]
    assert low.sizes == {"A.rows": 33, "A.cols": 33, "A.nnz": 33, "p.len": 33, "r.len": 33}
    assert step.cache_key(A, x, x)[3] == (("csr", 3), ("array", 1), ("array", 1))
    # the matrix's pointers, index type and sizes are no part of the key; its values' dtype is
    assert step.cache_key(_host_csr(70, 70, np.int64), np.ones(70), np.ones(70)) == step.cache_key(A, x, x)
    f32 = _host_csr(33, 33, dtype=np.float32)
    assert step.cache_key(f32, x.astype(np.float32), x.astype(np.float32))[2] == "float32"
    prog = step.compile(A, x, x)
    assert {kc.call.function.name for kc in prog.kernels[0].spec.calls} >= {"spmv", "dot"}


def test_a_jitted_csr_function_refuses_what_no_function_computes():
    from kfuse.errors import TraceError
    A, x = _host_csr(8, 5), np.ones(5)
    for f, words in ((lambda A, x: A.T @ x, ".T of a CSR matrix"), (lambda A, x: 2.0 * A, "* of a CSR matrix"),
                     (lambda A, x: x @ A, "x @ A of a CSR matrix"), (lambda A, x: A @ A, "must be a vector"),
                     (lambda A, x: A @ np.ones(3), "traced value cannot be combined")):
        with pytest.raises(TraceError) as e:
            kfuse.jit(f).trace(A, x)
        assert words in str(e.value), str(e.value)
    with pytest.raises(TraceError) as e:
        kfuse.jit(lambda A, x: A @ x).trace(A, np.ones(8))
    assert "its size 8 must be A's cols (5)" in str(e.value)
    with pytest.raises(TraceError) as e:
        kfuse.jit(lambda A, x: A @ x).trace(A, np.ones(5, np.float32))
    assert "mixed dtypes" in str(e.value)
    bad = kfuse.CSR(np.arange(9, dtype=np.int16), np.zeros(8, np.int16), np.ones(8), (8, 5))
    with pytest.raises(TraceError) as e:
        kfuse.jit(lambda A, x: A @ x).trace(bad, x)
    assert "int32 or int64" in str(e.value)


def test_jit_refuses_a_host_scipy_matrix_with_the_way_to_the_gpu():
    from kfuse.errors import TraceError

    @kfuse.jit
    def step(A, p):
        return kfuse.lib.spmv(A, p)

    with pytest.raises(TraceError) as e:
        step(_FakeScipy(), np.ones(3))
    assert "host memory" in str(e.value) and "cupyx.scipy.sparse.csr_matrix(A)" in str(e.value)
    assert "argument A of step" in str(e.value)


def _cg_body(s):
    A, bb, x, r, p, rr = s
    q = A @ p
    alpha = rr / (p @ q)
    x = x + alpha * p
    r = r - alpha * q
    rr_new = r @ r
    return A, bb, x, r, r + (rr_new / rr) * p, rr_new


def test_a_loop_body_reads_a_csr_state_entry_in_place():
    from kfuse.jit.loops import traced_body, _predicate, state_specs
    A, v, z = _host_csr(40, 40), np.ones(40), np.zeros(())
    body, leaves = traced_body(_cg_body, False, (A, z, v, v, v, z), "while_loop")
    assert body.sources[:2] == [("keep",), ("keep",)]
    assert [s[0] for s in body.sources[2:]] == ["out"] * 4
    assert body.lowered.program.inputs[0].type == "csr"
    assert "spmv(state0, state4)" in body.lowered.script
    specs, _ = state_specs(leaves, "while_loop")
    assert specs[0].kind == "csr" and specs[0].shape == (40, 40, 40)
    pred, consts = _predicate(lambda s: s[5] > 1e-6 * s[1], specs, tuple)
    assert consts == [1e-6]


def test_a_loop_refuses_a_csr_state_entry_moved_or_changed():
    from kfuse.errors import TraceError
    from kfuse.jit.loops import traced_body, _predicate, state_specs
    A, v = _host_csr(40, 40), np.ones(40)
    with pytest.raises(TraceError) as e:
        traced_body(lambda s: (s[1], s[0], s[1] @ s[2]), False, (A, A, v), "while_loop")
    assert "in its own place" in str(e.value)
    with pytest.raises(TraceError) as e:
        traced_body(lambda s: (s[0], 2.0 * s[0] @ s[1]), False, (A, v), "while_loop")
    assert "of a CSR matrix" in str(e.value)
    with pytest.raises(TraceError) as e:
        traced_body(lambda s: (s[0], s[1]), False, (_FakeScipy(), v), "fori_loop")
    assert "host memory" in str(e.value)
    specs, _ = state_specs([A, v, np.zeros(())], "while_loop")
    with pytest.raises(TraceError) as e:
        _predicate(lambda s: s[0] > 1.0, specs, tuple)
    assert "csr state entry" in str(e.value)


def test_the_sparse_cg_example_traces_its_start_and_loop_body():
    import sys
    from pathlib import Path
    from kfuse.jit.loops import traced_body
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "solvers"))
    import sparse_cg
    A, v, z = _host_csr(50, 50), np.ones(50), np.zeros(())
    assert [line.split("#")[0].strip() for line in sparse_cg._start.trace(A, v, v).script.splitlines()[5:8]] == \
        ["v1 = spmv(A, x);", "v2 = axpy(-1.0, v1, b);", "s3 = dot(v2, v2);"]
    body, _ = traced_body(lambda s: s[:2] + sparse_cg.cg_update(*s[:1], *s[2:]), False, (A, z, v, v, v, z), "while_loop")
    assert body.sources[:2] == [("keep",), ("keep",)] and "spmv(state0, state4)" in body.lowered.script
