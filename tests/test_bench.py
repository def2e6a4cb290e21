"""The benchmark harness on the CPU: formulas, rotation, check-then-time, rendering, the peers'
call sequences (against NumPy stand-ins for cupy.cublas and torch) and the whole run loop on a
NumPy stand-in for CuPy.  Needs no GPU, CuPy or PyTorch."""
import csv
import inspect
import json
import math
import sys
import types

import numpy as np
import pytest

import kfuse
from kfuse.bench import harness, peers, report
from kfuse.bench.records import (CONTENDERS, CUBLAS, ERROR, KFUSE, MISSING, NOT_AVAILABLE, OK, TORCH_COMPILE,
                                 TORCH_EAGER, WRONG, BenchRun, Record, SequenceInfo)
from kfuse.cli.main import main
from kfuse.reference import evaluate, random_inputs

from conftest import EXAMPLES, ROOT
from kfuse.compiler.callpath import CallPath
from kfuse.cost import counts


def compiled(name, dtype="float32"):
    return kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dtype)


# --- sizes, traffic, flops -----------------------------------------------------------------------

def test_sizes_follow_the_matrix_rule():
    p = compiled("bicgk").program
    assert set(harness.sequence_dims(p, 100, 7).values()) == {100}
    p = compiled("sscal").program
    assert set(harness.sequence_dims(p, 100, 7).values()) == {7}


def test_bicgk_traffic_and_flops_by_hand():
    n = 100
    prog = compiled("bicgk")
    dims = harness.sequence_dims(prog.program, n, 1)
    # q = A p (2 n^2 flops), s = A^T r (2 n^2)
    assert counts.flops(prog.program, dims) == 4 * n * n == 40_000
    # one pass: A, p, r read once; q, s written once
    assert counts.compulsory_traffic(prog.program, prog.dtype, dims) == (n * n + 4 * n) * 4 == 41_600
    # two kernels (gemv, gemtv) each move A and two vectors; fused into one: A once
    assert counts.traffic(prog.program, prog.kernels, prog.dtype, dims) == {2: 2 * (n * n + 2 * n) * 4, 1: 41_600}[len(prog.kernels)]
    assert harness.input_bytes(prog.program, dims, "float32") == (n * n + 2 * n) * 4
    p64 = compiled("bicgk", "float64")
    assert counts.compulsory_traffic(p64.program, p64.dtype, dims) == 2 * 41_600 and counts.flops(p64.program, dims) == 40_000


def test_single_call_and_vector_traffic_by_hand():
    n = 100
    prog = compiled("sgemv")                    # z = a A x + b y: one call, one kernel in any plan
    dims = harness.sequence_dims(prog.program, n, 1)
    assert counts.traffic(prog.program, prog.kernels, prog.dtype, dims) == counts.compulsory_traffic(prog.program, prog.dtype, dims) == (n * n + 3 * n) * 4 == 41_200
    assert counts.flops(prog.program, dims) == 2 * n * n + 3 * n == 20_300
    N = 1000
    prog = compiled("axpydot")                  # z = w - a v (2N), r = z . u (2N)
    dims = harness.sequence_dims(prog.program, 1, N)
    assert counts.flops(prog.program, dims) == 4 * N
    assert counts.compulsory_traffic(prog.program, prog.dtype, dims) == (4 * N + 1) * 4    # w, v, u, z and the scalar r


def test_a_csr_matrix_counts_its_three_arrays_as_the_planner_does():
    """Values and column indices per non-zero, a row pointer per row (and one): not rows x cols x nnz."""
    prog = kfuse.compile("csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n")
    A, x, y = (next(v for v in prog.program.values if v.name == n) for n in "Axy")
    rows, cols, nnz = 1000, 900, 7000
    dims = {A.dims[0]: rows, A.dims[1]: cols, A.dims[2]: nnz}
    assert counts.compulsory_traffic(prog.program, prog.dtype, dims) == (2 * nnz + rows + 1 + cols + rows) * 4
    assert counts.traffic(prog.program, prog.kernels, prog.dtype, dims) == (2 * nnz + rows + 1 + cols + rows) * 4


def test_metric_formulas():
    assert report.gflops(40_000, 2.0) == pytest.approx(20.0)
    sscal = 2 * 2**26 * 4                       # read x, write a x: 2^26 float32 each
    assert report.limit_us(sscal, 3000.0) == pytest.approx(178.957, abs=1e-3)   # ANCHORS: 178.9
    assert report.gbps(sscal, report.limit_us(sscal, 3000.0)) == pytest.approx(3000.0)
    assert report.speedup(669.0, 334.5) == pytest.approx(2.0)
    assert report.fmt_size(8192) == "8192" and report.fmt_size(2**26) == "2^26"
    assert report.fmt_size(3 * 2**20) == "3145728"
    assert report.fmt_cuda_version(12080) == "12.8" and report.fmt_cuda_version(13000) == "13.0"


def test_rotation_sets():
    l2 = 50 * 2**20
    assert harness.rotation_sets(256 * 10**6, l2) == 1            # n = 8192 float32: larger than 4 x L2
    assert harness.rotation_sets(4 * l2, l2) == 1
    assert harness.rotation_sets(4 * 2**20, l2) == 50             # n = 1024 float32 matrix: 200 MiB / 4 MiB
    assert harness.rotation_sets(3 * 2**20, l2) == math.ceil(200 / 3)
    assert harness.rotation_sets(12, l2) == harness.MAX_INPUT_SETS
    assert harness.rotation_sets(12, l2, cap=10**9) == math.ceil(200 * 2**20 / 12)


def test_tolerances():
    assert harness.tolerance(KFUSE, "float32") == 1e-5 and harness.tolerance(KFUSE, "float64") == 1e-12
    assert harness.tolerance(CUBLAS, "float32") == 1e-4 and harness.tolerance(TORCH_COMPILE, "float64") == 1e-11


def test_cycle_calls_rotates():
    seen = []
    call = harness.cycle_calls([lambda i=i: seen.append(i) for i in range(3)])
    for _ in range(7):
        call()
    assert seen == [0, 1, 2, 0, 1, 2, 0]
    one = lambda: None  # noqa: E731
    assert harness.cycle_calls([one]) is one


# --- check, then time ----------------------------------------------------------------------------

class FakeTimer:
    def __init__(self, t=123.0):
        self.t, self.calls = t, []

    def __call__(self, fn):
        self.calls.append(fn)
        fn()
        return self.t


def expected_for(name="sgemv", n=50, seed=1):
    prog = compiled(name)
    p = prog.program
    dims = harness.sequence_dims(p, n, n)
    host = random_inputs(p, dims, seed)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    return host, [(v.name, ref[v.id], mag[v.id]) for v in p.outputs]


def test_correct_contender_is_checked_then_timed():
    host, expected = expected_for()
    right = expected[0][1].astype(np.float32)
    timed = lambda: None  # noqa: E731
    timer = FakeTimer(42.0)
    r = harness.check_then_time("sgemv", "float32", CUBLAS, lambda: (lambda: right, timed), expected, timer)
    assert r.status == OK and r.time_us == 42.0 and r.error < 1e-6 and r.tolerance == 1e-4
    assert timer.calls == [timed]


def test_wrong_contender_is_not_timed():
    host, expected = expected_for()
    wrong = expected[0][1] * 1.01
    timer = FakeTimer()
    r = harness.check_then_time("sgemv", "float32", TORCH_COMPILE, lambda: (lambda: wrong, lambda: None),
                                expected, timer)
    assert r.status == WRONG and r.time_us is None and r.error > 1e-3 and "not timed" in r.note
    assert timer.calls == []
    # a result a decade off kfuse's tolerance but within the peers' is WRONG for kfuse only
    near = expected[0][1] + 3e-5 * np.linalg.norm(expected[0][2]) / np.sqrt(expected[0][1].size)
    assert harness.check_then_time("sgemv", "float32", KFUSE, lambda: (lambda: near, None), expected,
                                   FakeTimer()).status == WRONG
    assert harness.check_then_time("sgemv", "float32", CUBLAS, lambda: (lambda: near, lambda: None), expected,
                                   FakeTimer()).status == OK


def test_unwritten_output_and_failures_are_caught():
    host, expected = expected_for("bicgk")
    q, s = (e[1] for e in expected)
    timer = FakeTimer()
    nan = np.full_like(s, np.nan)
    r = harness.check_then_time("bicgk", "float32", KFUSE, lambda: (lambda: (q, nan), None), expected, timer)
    assert r.status == WRONG and r.error == math.inf and "s inf" in r.note
    r = harness.check_then_time("bicgk", "float32", KFUSE, lambda: (lambda: q, None), expected, timer)
    assert r.status == ERROR and "returned 1 result(s); the script returns 2" in r.note

    def boom():
        raise RuntimeError("no kernel image")
    r = harness.check_then_time("bicgk", "float32", TORCH_EAGER, boom, expected, timer)
    assert r.status == ERROR and "RuntimeError: no kernel image" in r.note
    r = harness.check_then_time("bicgk", "float32", TORCH_EAGER, lambda: (lambda: (q, s), None), expected,
                                lambda fn: fn())
    assert r.status == ERROR and r.note.startswith("timing failed: TypeError")
    assert timer.calls == []


def test_record_invariants():
    with pytest.raises(ValueError):
        Record("x", "float32", KFUSE, "fine")
    with pytest.raises(ValueError):
        Record("x", "float32", KFUSE, WRONG, time_us=1.0)
    with pytest.raises(ValueError):
        Record("x", "float32", KFUSE, OK, time_us=1.0, q1_us=0.9)
    with pytest.raises(ValueError):
        Record("x", "float32", KFUSE, WRONG, error=1.0, q1_us=0.9, q3_us=1.1)


# --- the spread beside the median ----------------------------------------------------------------

def test_quartiles():
    from kfuse.runtime.timing import quartiles
    assert quartiles([5.0]) == (5.0, 5.0, 5.0)
    assert quartiles([4, 1, 3, 2, 5]) == (2.0, 3.0, 4.0)
    q = quartiles([1.0, 2.0, 3.0, 100.0])
    assert q.median == 2.5 and q.q1 == 1.75 and q.q3 == 27.25
    with pytest.raises(ValueError):
        quartiles([])


def test_timer_quartiles_are_recorded_and_shown(tmp_path):
    host, expected = expected_for()
    right = expected[0][1].astype(np.float32)
    timer = FakeTimer((40.5, 42.0, 44.25))
    r = harness.check_then_time("sscal", "float32", KFUSE, lambda: (lambda: right, lambda: None), expected, timer)
    assert (r.q1_us, r.time_us, r.q3_us) == (40.5, 42.0, 44.25)
    assert "42.0 us [40.5, 44.2]  ok" in harness.progress_line(r)
    run = fixed_run()
    run.records[0] = Record("sscal", "float32", KFUSE, OK, time_us=180.0, q1_us=179.25, q3_us=182.5, error=1e-8,
                            tolerance=1e-5)
    text = report.markdown(run)
    assert "| SSCAL | 180.0 (179.2–182.5) | 227.9 | 183.3 | n/a |" in text
    assert "with the first and third quartiles in brackets" in text
    report.write_csv(run, tmp_path / "r.csv")
    with open(tmp_path / "r.csv", newline="") as f:
        rows = {(r["sequence"], r["contender"]): r for r in csv.DictReader(f)}
    k = rows[("sscal", KFUSE)]
    assert (float(k["q1_us"]), float(k["time_us"]), float(k["q3_us"])) == (179.25, 180.0, 182.5)
    assert rows[("sscal", CUBLAS)]["q1_us"] == ""                   # the timer gave a median only


def test_device_timer_gives_quartiles(monkeypatch):
    from kfuse.runtime import timing
    monkeypatch.setattr(timing, "quartiles_us", lambda fn, **k: timing.Quartiles(1.0, 2.0, 3.0))
    assert harness.device_timer(5, 1)(lambda: None) == (1.0, 2.0, 3.0)


# --- the peers' call sequences, on NumPy stand-ins -------------------------------------------

class NumpyCublas:
    """cupy.cublas's semantics on NumPy arrays (row-major, like the CuPy arrays the bench passes)."""

    @staticmethod
    def _op(a, trans):
        return a.T if trans == "T" else a

    def gemv(self, transa, alpha, a, x, beta, y):
        ax = alpha * (self._op(a, transa) @ x)
        y[...] = ax if beta == 0 else ax + beta * y        # beta = 0: y is not read (BLAS)

    def ger(self, alpha, x, y, a):
        a += alpha * np.outer(x, y)

    def axpy(self, a, x, y):
        y += a * x

    def scal(self, a, x):
        x *= a

    def dot(self, x, y, out=None):
        out[...] = x @ y
        return out

    def geam(self, transa, transb, alpha, a, beta, b, out=None):
        out[...] = alpha * self._op(a, transa) + beta * self._op(b, transb)
        return out


class NumpyTorch:
    mv = staticmethod(lambda A, x: A @ x)
    dot = staticmethod(lambda x, y: np.dot(x, y))
    outer = staticmethod(np.outer)

    @staticmethod
    def addmv(input, mat, vec, *, beta=1, alpha=1):  # noqa: A002 - torch's name
        return beta * input + alpha * (mat @ vec)


STEMS = [p.stem for p in EXAMPLES]


def test_every_example_has_every_peer():
    assert set(peers.CUBLAS_SEQUENCES) >= set(STEMS)
    assert set(peers.torch_sequences(NumpyTorch)) >= set(STEMS)


@pytest.mark.parametrize("stem", STEMS)
def test_torch_peer_takes_the_script_inputs(stem):
    p = compiled(stem).program
    fn = peers.torch_sequences(NumpyTorch)[stem]
    assert set(inspect.signature(fn).parameters) == {v.name for v in p.inputs}


@pytest.mark.parametrize("stem", STEMS)
def test_peer_call_sequences_compute_the_script(stem):
    p = compiled(stem).program
    dims = harness.sequence_dims(p, 37, 301)
    host = random_inputs(p, dims, 3)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    expected = [(v.name, ref[v.id], mag[v.id]) for v in p.outputs]
    outs = {v.name: np.full(tuple(dims[d] for d in v.dims), np.nan) for v in p.outputs}
    run = peers.CUBLAS_SEQUENCES[stem](NumpyCublas(), np.copyto, dict(host), outs)
    run()
    errors = harness.output_errors([outs[v.name] for v in p.outputs], expected)
    assert max(errors.values()) < 1e-12, errors
    run()   # a repeated call computes the same (in-place SSCAL alternates a and 1/a)
    again = harness.output_errors([outs[v.name] for v in p.outputs], expected)
    if stem == "sscal":
        assert harness.output_errors([outs["ax"]], [("ax", host["x"], np.abs(host["x"]))])["ax"] < 1e-12
    else:
        assert max(again.values()) < 1e-12, again
    got = harness.as_tuple(peers.torch_sequences(NumpyTorch)[stem](**host))
    errors = harness.output_errors(got, expected)
    assert max(errors.values()) < 1e-12, errors


# --- rendering -----------------------------------------------------------------------------------

def fixed_run() -> BenchRun:
    run = BenchRun(n=8192, N=2**26, reps=100, warmup=10, copy_gbps=3000.0, copy_bytes=2**30, l2_bytes=50 * 2**20,
                   env={"gpu": "NVIDIA H100 80GB HBM3", "driver_version": "580.1", "cuda_runtime_version": 13000,
                        "cupy": "14.0", "torch": "2.11", "numpy": "2.4", "python": "3.12", "kfuse": "0.1.0",
                        "library_digest": "abc", "date": "2026-01-01T00:00:00+00:00", "command": "kfuse bench"},
                   peer_notes={})
    n, N = 8192, 2**26
    run.sequences = [
        SequenceInfo("sscal", "float32", {"N": N}, flops=N, plan_bytes=2 * N * 4, onepass_bytes=2 * N * 4,
                     input_bytes=N * 4, kernels=1, plan="scal/quad", tuned=True),
        SequenceInfo("bicgk", "float32", {"n": n}, flops=4 * n * n, plan_bytes=2 * (n * n + 2 * n) * 4,
                     onepass_bytes=(n * n + 4 * n) * 4, input_bytes=(n * n + 2 * n) * 4, kernels=2),
    ]
    run.records = [
        Record("sscal", "float32", KFUSE, OK, time_us=180.0, error=1e-8, tolerance=1e-5),
        Record("sscal", "float32", CUBLAS, OK, time_us=227.9, error=1e-8, tolerance=1e-4),
        Record("sscal", "float32", TORCH_EAGER, OK, time_us=183.3, error=1e-8, tolerance=1e-4),
        Record("sscal", "float32", TORCH_COMPILE, NOT_AVAILABLE, note="skipped (--no-torch-compile)"),
        Record("bicgk", "float32", KFUSE, OK, time_us=180.0, error=1e-7, tolerance=1e-5),
        Record("bicgk", "float32", CUBLAS, OK, time_us=209.0, error=1e-7, tolerance=1e-4),
        Record("bicgk", "float32", TORCH_EAGER, WRONG, error=3e-2, tolerance=1e-4, note="error above 1e-04"),
        Record("bicgk", "float32", TORCH_COMPILE, ERROR, note="RuntimeError: boom"),
    ]
    return run


def test_markdown_table():
    text = report.markdown(fixed_run())
    lines = text.splitlines()
    assert lines[0] == "# kfuse benchmark: NVIDIA H100 80GB HBM3"
    assert "**3000 GB/s**" in text and "n = 8192 (matrices), N = 2^26 (vectors)" in text
    assert "(268 MB or more per call) are larger than the L2 cache" in text and "CUDA runtime 13.0" in text
    i = lines.index("## float32")
    assert lines[i + 2] == ("| sequence | kfuse | cuBLAS | torch eager | torch.compile | limit | one-pass | "
                            "kfuse GFLOPS | kfuse GB/s | % of copy | vs cuBLAS | vs eager | vs compile | kernels |")
    assert lines[i + 3] == "| --- | " + " | ".join(["---:"] * 13) + " |"
    assert lines[i + 4] == ("| SSCAL | 180.0 | 227.9 | 183.3 | n/a | 179.0 | 179.0 | 372.8 | 2983 | 99% | "
                            "1.27× | 1.02× | — | 1 |")
    assert lines[i + 5] == ("| BiCGK | 180.0 | 209.0 | WRONG (3e-02) | error | 179.0 | 89.5 | 1491.3 | 2983 | 99% | "
                            "1.16× | — | — | 2 |")
    assert "| SSCAL | 99% | 79% | 98% | — |" in lines   # 536.9 MB / 227.9 us / 3000 GB/s
    assert "- BiCGK, torch.compile: error: RuntimeError: boom" in lines


def test_csv_parses_back(tmp_path):
    run = fixed_run()
    report.write_csv(run, tmp_path / "r.csv")
    with open(tmp_path / "r.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(CONTENDERS)
    assert tuple(rows[0]) == report.CSV_FIELDS
    by = {(r["sequence"], r["contender"]): r for r in rows}
    k, c = by[("sscal", KFUSE)], by[("sscal", CUBLAS)]
    assert float(k["time_us"]) == 180.0 and int(k["kernels"]) == 1 and c["kernels"] == ""
    assert float(k["gflops"]) == pytest.approx(2**26 / 180.0 / 1e3)
    assert float(k["limit_us"]) == pytest.approx(2 * 2**26 * 4 / 3e6)
    assert float(c["kfuse_speedup"]) == pytest.approx(227.9 / 180.0)
    assert float(c["frac_copy"]) == pytest.approx(2 * 2**26 * 4 / 227.9 / 1e3 / 3000)
    w = by[("bicgk", TORCH_EAGER)]
    assert w["status"] == WRONG and w["time_us"] == "" and float(w["error"]) == 3e-2 and w["gflops"] == ""
    assert by[("bicgk", KFUSE)]["sizes"] == "n=8192" and float(k["copy_gbps"]) == 3000.0
    assert k["plan"] == "scal/quad" and k["tuned"] == "True" and c["plan"] == "" and c["tuned"] == ""
    assert by[("bicgk", KFUSE)]["tuned"] == "False"


def test_bench_records_the_commit_and_the_plan_source():
    from kfuse.bench.harness import git_commit
    from kfuse.bench.records import COLOURS
    import re
    from conftest import ROOT
    got = git_commit()
    if (ROOT / ".git").exists():
        assert got is not None and re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", got), got
    assert set(COLOURS) == set(CONTENDERS) and len(set(COLOURS.values())) == len(COLOURS)
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)
    assert prog.from_store is False
    assert prog.plan.summary().count(";") == len(prog.plan.kernels) - 1 and "gemv/" in prog.plan.summary()


def test_write_outputs(tmp_path):
    written, notes = report.write_outputs(fixed_run(), tmp_path / "out")
    names = {p.name for p in written}
    assert {"results.md", "results.csv", "env.json"} <= names
    env = json.loads((tmp_path / "out" / "env.json").read_text())
    assert env["gpu"] == "NVIDIA H100 80GB HBM3" and env["settings"]["n"] == 8192
    assert env["copy_bandwidth_gbps"] == 3000.0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert notes and "matplotlib is not importable" in notes[0]
    else:
        assert {"speedup.png", "bandwidth.png"} <= names
        assert (tmp_path / "out" / "speedup.png").read_bytes()[:4] == b"\x89PNG"


# --- command line --------------------------------------------------------------------------------

def test_bench_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--no-torch-compile" in out and "--reps" in out


def test_bench_options_and_outputs(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run_bench(opts, checkpoint=None, **_):
        seen["opts"] = opts
        run = fixed_run()
        checkpoint(run)
        return run
    monkeypatch.setattr("kfuse.bench.run_bench", fake_run_bench)
    monkeypatch.setattr("kfuse.runtime.gpu.have_gpu", lambda: True)
    rc = main(["bench", "--n", "1024", "--N", "2^20", "--dtype", "both", "--seq", "bicgk", "--seq", "sscal",
               "--reps", "7", "--warmup", "2", "--no-torch-compile", "--out", str(tmp_path / "b")])
    assert rc == 0
    o = seen["opts"]
    assert (o.n, o.N, o.dtypes, o.reps, o.warmup, o.torch_compile) == (1024, 2**20, ("float32", "float64"), 7, 2,
                                                                         False)
    assert [p.stem for p in o.sequences] == ["bicgk", "sscal"]
    assert o.command.startswith("kfuse bench --n 1024")
    assert (tmp_path / "b" / "results.md").is_file()
    assert "wrote" in capsys.readouterr().err


def test_bench_rejects_unknown_sequence(capsys):
    assert main(["bench", "--seq", "gemverr"]) == 1
    assert "--seq gemverr: no example of that name" in capsys.readouterr().err


def test_default_sequences_in_paper_order():
    assert [p.stem for p in harness.default_sequences()][:11] == list(harness.PAPER_ORDER)


# --- the whole run loop, on NumPy stand-ins for CuPy and the GPU -------------------------------

def fake_cupy():
    cp = types.ModuleType("cupy")
    cp.__version__ = "fake"
    cp.ndarray, cp.float32 = np.ndarray, np.float32
    cp.asarray, cp.full, cp.ones, cp.empty_like, cp.copyto = np.asarray, np.full, np.ones, np.empty_like, np.copyto
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    device = types.SimpleNamespace(id=0, compute_capability="90",
                                   attributes={"MultiProcessorCount": 1, "L2CacheSize": 16 * 2**10})
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, driverGetVersion=lambda: 13000,
                                    runtimeGetVersion=lambda: 13000,
                                    getDeviceProperties=lambda i: {"name": b"Fake GPU", "totalGlobalMem": 0})
    cp.cuda = types.SimpleNamespace(runtime=runtime, Device=lambda: device,
                                    get_current_stream=lambda: types.SimpleNamespace(synchronize=lambda: None),
                                    nvrtc=types.SimpleNamespace(getVersion=lambda: (13, 0)))
    cp.cublas = NumpyCublas()
    return cp


def numpy_outputs(calls, out=None, sync=False, **inputs):
    """``CallPath.outputs`` stood in for by NumPy (the call path's compiled script's program)."""
    return numpy_kfuse_call(calls._compiled, out, sync, **inputs)


def numpy_kfuse_call(self, out=None, sync=False, **inputs):
    """kfuse's program evaluated by NumPy into the given outputs (stands in for the GPU)."""
    vals = evaluate(self.program, inputs)
    res = []
    for v in self.program.outputs:
        if out is None:             # kfuse's own outputs
            res.append(np.asarray(vals[v.id]))
            continue
        out[v.name][...] = vals[v.id]
        res.append(out[v.name])
    return tuple(res) if len(res) > 1 else res[0]


def numpy_kfuse_bind(self, out=None, **inputs):
    return lambda sync=False: numpy_kfuse_call(self, out=out, sync=sync, **inputs)


def test_run_loop_on_numpy_stand_ins(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    monkeypatch.setattr(kfuse.CompiledScript, "__call__", numpy_kfuse_call)
    monkeypatch.setattr(CallPath, "outputs", numpy_outputs)
    monkeypatch.setattr(kfuse.CompiledScript, "bind", numpy_kfuse_bind)
    monkeypatch.setattr(peers, "load_torch", lambda: (None, "disabled in this test"))
    wrong = dict(peers.CUBLAS_SEQUENCES)

    def bad_vadd(cb, copyto, i, o):
        def run():
            copyto(o["x"], i["w"])
            cb.axpy(1.0, i["y"], o["x"])     # forgets z
        return run
    wrong["vadd"] = bad_vadd
    del wrong["madd"]
    monkeypatch.setattr(peers, "CUBLAS_SEQUENCES", wrong)
    timer = FakeTimer(100.0)
    lines, checkpoints = [], []
    opts = harness.BenchOptions(n=40, N=1000, dtypes=("float32", "float64"), reps=3, warmup=1,
                                sequences=tuple(harness.resolve_sequences(["bicgk", "sscal", "vadd", "madd"])))
    run = harness.run_bench(opts, log=lines.append, checkpoint=checkpoints.append, timer=timer)
    assert len(checkpoints) == 8 and run.env["gpu"] == "Fake GPU"
    assert run.copy_gbps == pytest.approx(2 * 4 * (2**30 // 4) / 100.0 / 1e3)
    status = {(r.sequence, r.dtype, r.contender): r.status for r in run.records}
    assert len(status) == 4 * 2 * 4
    for seq in ("bicgk", "sscal", "vadd", "madd"):
        for dt in ("float32", "float64"):
            assert status[(seq, dt, KFUSE)] == OK
            assert status[(seq, dt, TORCH_EAGER)] == status[(seq, dt, TORCH_COMPILE)] == NOT_AVAILABLE
    assert status[("bicgk", "float32", CUBLAS)] == status[("sscal", "float64", CUBLAS)] == OK
    assert status[("vadd", "float32", CUBLAS)] == WRONG and status[("madd", "float32", CUBLAS)] == MISSING
    # the copy, then kfuse and cuBLAS where they passed: 1 + 8 + 4 timings; the wrong peer never
    assert len(timer.calls) == 1 + 8 + 4
    info = next(s for s in run.sequences if s.sequence == "bicgk" and s.dtype == "float32")
    assert info.input_sets == harness.rotation_sets(info.input_bytes, 16 * 2**10) > 1
    assert any("[float32] VADD" in line and "WRONG" in line for line in lines)
    assert any("torch eager: not available: disabled in this test" in line for line in lines)
    written, _ = report.write_outputs(run, tmp_path, charts=False)
    text = (tmp_path / "results.md").read_text()
    assert "## float64" in text and "| VADD | 100.0 | WRONG (" in text and "rotate between input sets" in text


def test_charts_keep_colours_and_put_legends_off_the_bars(monkeypatch, tmp_path):
    """On a stand-in for matplotlib: every contender has its colour in every chart, and each
    legend sits outside the axes (right of them), never over the bars."""
    from kfuse.bench.records import COLOURS
    calls = []

    class Axes:
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return lambda *a, **k: calls.append((name, a, k))

    class Fig:
        def tight_layout(self):
            pass

        def savefig(self, path, **k):
            open(path, "wb").close()

    def subplots(rows, cols, **k):
        return Fig(), np.array([[Axes()] for _ in range(rows)], dtype=object)
    mpl = types.ModuleType("matplotlib")
    mpl.use = lambda *a, **k: None
    plt = types.ModuleType("matplotlib.pyplot")
    plt.subplots, plt.close = subplots, lambda fig: None
    mpl.pyplot = plt
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", plt)
    written, notes = report.write_charts(fixed_run(), tmp_path)
    assert [p.name for p in written] == ["speedup.png", "bandwidth.png"] and notes == []
    bars = [(k["label"], k["color"]) for name, a, k in calls if name == "bar"]
    assert bars and all(COLOURS[label] == colour for label, colour in bars)
    legends = [k for name, a, k in calls if name == "legend"]
    assert len(legends) == 2 and all(k["bbox_to_anchor"][0] > 1 and k["loc"] == "upper left" for k in legends)


# ---- per-call results: read back from their CSV, drawn in the bench charts' colours -------------
def test_per_call_csv_reads_back_and_charts_keep_the_bench_colours(tmp_path):
    from kfuse.bench import percall
    from kfuse.bench.records import COLOURS
    from kfuse.errors import KfuseError
    rows = [percall.PerCallRow("sscal", "float32", 1024, 2**20, 6.25, 1),
            percall.PerCallRow("gemver", "float64", 8192, 2**26, 281.5, 2)]
    for n, r in enumerate(rows):
        for k, name in enumerate(percall.COLUMNS):
            if (n, k) != (1, 6):                     # one missing time stays missing
                r.records[name] = percall.Record(r.sequence, r.dtype, name, percall.OK, 10.0 * (k + 1) + n)
    percall.write_outputs(rows, 3000.0, tmp_path)
    back = percall.read_csv(tmp_path / "per-call.csv")
    assert [(r.sequence, r.dtype, r.n, r.N, r.kernels, r.gpu_us) for r in back] == \
        [(r.sequence, r.dtype, r.n, r.N, r.kernels, r.gpu_us) for r in rows]
    assert [[r.us(k) for k in percall.COLUMNS] for r in back] == [[r.us(k) for k in percall.COLUMNS] for r in rows]
    assert back[1].us(percall.COLUMNS[6]) is None
    for name in (percall.CUBLAS, percall.EAGER, percall.COMPILE):
        assert percall.PER_CALL_COLOURS[name] == COLOURS[name]
    assert percall.PER_CALL_COLOURS[percall.PLAIN] == COLOURS["kfuse"]
    assert len(set(percall.PER_CALL_COLOURS.values())) == len(percall.PER_CALL_COLOURS)
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(KfuseError, match="not a per-call CSV"):
        percall.read_csv(tmp_path / "bad.csv")


def test_the_loops_table_sets_the_models_prices_against_the_times(monkeypatch):
    """benchmarks/loops.py (no GPU for this part): each method's step priced as a plain call and as a
    device-loop step, and the table's last column their ratios to the times measured."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import loops
    got = {m: loops.prices(m, 1024, "float32") for m in ("cg", "power", "lanczos")}
    for m, p in got.items():
        assert p["kernels"] >= 2 and p["plain call"] > p["device loop step"] > 0, (m, p)
    cp = types.SimpleNamespace(__version__="test", cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceProperties=lambda i: {"name": b"test GPU"})))
    row = {"method": "cg", "dtype": "float32", "n": 1024, "us": {"kfuse device loop": 5.0, "kfuse plain loop": 10.0},
           "err": {}, "note": {}, "limit": 1.5, "price": got["cg"]}
    last = loops.report([row], types.SimpleNamespace(steps=60, reps=5, check=30), cp, None, 3e12).splitlines()[-1]
    want = f"{got['cg']['device loop step'] / 5.0:.2f}, {got['cg']['plain call'] / 10.0:.2f}"
    assert last.endswith(f"| {want} |"), last
