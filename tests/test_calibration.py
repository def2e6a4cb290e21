"""Calibration: file format and lookup, prediction arithmetic, ranking, micro-kernels (CPU)."""
import json
import math

import pytest

import kfuse
from kfuse.cost import calibrated, store
from kfuse.cost.calibrated import CalibratedModel, choose_model, resident_fraction
from kfuse.ir.kernel import target_blocks
from kfuse.calibration.probes import Env, barrier_probes, library_probes, probe_module
from kfuse.bench.prediction import SequenceResult, markdown
from kfuse.cost.store import Calibration, find, read_file, write_entry
from kfuse.ir.kernel import KernelCall, KernelSpec
from kfuse.codegen.kernel import build_kernel
from kfuse.errors import CalibrationError, KfuseError
from kfuse.frontend import parse_script
from kfuse.cost.transfer import DEFAULT_MACHINE, atomic_warps

from calib_util import synthetic
from test_library import make_library, scal_function
from test_nvcc import nvcc_compile, nvcc_compile_all

GEMV = "matrix A; vector x, y; input A, x; y = gemv(A, x); return y;"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No user calibration, no shipped one, notices fresh: each test sets up what it needs."""
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KFUSE_CALIBRATION", raising=False)
    monkeypatch.setattr(store, "SHIPPED", tmp_path / "shipped")
    monkeypatch.setattr(calibrated, "SHIPPED", tmp_path / "shipped")
    monkeypatch.setattr(calibrated, "_noticed", set())


def flat(ns_load=1.0, ns_compute=0.5, ns_store=1.0):
    return lambda keys, p, env: {"load": ns_load, "compute": ns_compute, "store": ns_store}[p.kind]


# ---- probes ---------------------------------------------------------------------------------
def test_every_routine_has_a_probe_and_equal_routines_share_one(lib):
    keys, probes = library_probes(lib)
    for fn in lib.functions:
        for var in fn.variants:
            if var.cluster or (var.whole and fn.nesting == 1) or any(p.type == "csr" for p in fn.params):
                # not probed: a cluster's routines read the other blocks' shared memory, a vector
                # call on the rows of strips runs only beside a matrix call, a sparse mat-vec's cost
                # depends on its matrix
                assert not any(f"/{var.name}/" in k for k in keys if k.startswith(f"{fn.name}("))
                continue
            for r in var.routines:
                if fn.grid and r.kind == "compute":
                    # not probed: a stencil's compute reads a grid view (extents a probe lacks)
                    assert not any(k.startswith(f"{fn.name}(") and k.endswith(f"/{r.name}") for k in keys)
                    continue
                assert any(k.startswith(f"{fn.name}(") and k.endswith(f"/{var.name}/" + k.split("/")[2] + f"/{r.name}")
                           for k in keys), (fn.name, var.name, r.name)
    # blas1_load serves every BLAS-1 input of the warp variants: one probe
    warp_loads = {pid for k, pid in keys.items() if "/warp/" in k and "/load_" in k}
    assert len(warp_loads) == 1
    # every macro value of every variant is a routine key of its own
    assert sum(1 for k in keys if k.startswith("gemv(A,x)/shfl/") and k.endswith("/load_A")) == 4
    assert {p.kind for p in probes.values()} == {"load", "compute", "store"}
    assert any(p.atomic for p in probes.values())
    bars = barrier_probes(probes)
    assert {(n, t) for n, t, _, _ in bars} >= {(1, 256), (1, 1024), (2, 64), (2, 128), (2, 256), (2, 512)}


def test_micro_kernel_keeps_its_work(lib):
    _, probes = library_probes(lib)
    load = next(p for p in probes.values() if p.fn == "tile_load" and dict(p.macros) == {"BY": 8})
    text, _ = load.kernel(Env("i", 4, 1))
    assert "tile_load<8>(rix, g_g0, e_e1_u3);" in text
    assert text.index("e_e1_u3);") < text.index("kf_acc += e_e1_u0")      # loads issued together
    assert "if (kill) sink[0] = kf_acc;" in text
    comp = next(p for p in probes.values() if p.fn == "gemtv_compute")
    text, _ = comp.kernel(Env("j", 1, 1))
    assert "+= kf_acc;" in text and "kf_acc += e_" in text                # inputs vary, outputs folded
    store_ = next(p for p in probes.values() if p.fn == "rowsum_store")
    assert store_.atomic and "real(it + 0)" in store_.kernel(Env("i", 1, 1))[0]
    smem = next(p for p in probes.values() if p.fn == "gemv_smem_partial")
    text, views = smem.kernel(Env("i", 1, 1))
    assert smem.uses_shared and "__shared__ real kf_smem[" in text and views
    assert all(e.unroll == 1 for e in smem.environments())
    envs = load.environments()
    assert {(e.loop, e.unroll, e.occupancy) for e in envs} >= {("i", 4, "full"), ("j", 2, "full"), ("j", 1, "half")}


def _probe_jobs(lib, every_environment=True):
    """Every probe in every environment (float32), the barrier probes; one environment each in
    float64.  ``every_environment=False``: one environment of each probe, the dtypes by turns."""
    _, probes = library_probes(lib)
    if not every_environment:        # each probe once, in one dtype or the other by turns
        ps = list(probes.values())
        return (("float32", [(p, p.environments()[0]) for p in ps[0::2]]),
                ("float64", [(p, p.environments()[-2]) for p in ps[1::2]]))
    jobs = [(p, e) for p in probes.values() for e in p.environments()]
    jobs += [(p, Env("i", 1, env.ipb, barrier=True)) for _, _, p, env in barrier_probes(probes)]
    return (("float32", jobs), ("float64", [(p, p.environments()[-2]) for p in probes.values()]))


def test_every_micro_kernel_compiles_with_nvcc(nvcc, tmp_path, lib):
    """Every probe (one environment each, float32 and float64 by turns) and the empty kernel: nvcc -arch=sm_90
    -cubin, warnings as errors, in modules of ``CHUNK`` micro-kernels as ``kfuse calibrate`` builds
    them, built in parallel.  Every environment and the barrier probes, in one module: the slow
    test below."""
    from kfuse.calibration.measure import CHUNK
    for dtype, subset in _probe_jobs(lib, every_environment=False):
        pieces = [probe_module(lib, dtype, subset[k:k + CHUNK], empty=k == 0) for k in range(0, len(subset), CHUNK)]
        nvcc_compile_all(nvcc, pieces, tmp_path, f"probes_{dtype}", optimise=False)


@pytest.mark.slow
def test_every_micro_kernel_in_every_environment_compiles_with_nvcc_in_one_module(nvcc, tmp_path, lib):
    """Every probe in every environment (float32), one environment each in float64, the barrier
    probes and the empty kernel, each dtype in one module: no name or definition clashes between
    calibrate's chunks (one nvcc build of about 146,000 lines: about 6 minutes on 2 cores)."""
    for dtype, subset in _probe_jobs(lib):
        nvcc_compile(nvcc, probe_module(lib, dtype, subset, empty=True), tmp_path, f"probes_{dtype}")
        names = {p.kernel_name(e) for p, e in subset}
        assert len(names) == len(subset)


# ---- file format and lookup ------------------------------------------------------------------
def test_round_trip_and_lookup(tmp_path, lib):
    path = tmp_path / "cal.json"
    a = synthetic(lib, flat(), gpu="GPU A")
    b = synthetic(lib, flat(2.0), gpu="GPU B", dtype="float64")
    write_entry(path, a)
    write_entry(path, b)
    write_entry(path, synthetic(lib, flat(3.0), gpu="GPU A"))          # replaces the first
    got = read_file(path)
    assert sorted(c.key for c in got) == [("GPU A", lib.digest, "float32"), ("GPU B", lib.digest, "float64")]
    again = next(c for c in got if c.gpu == "GPU A")
    assert again.to_json()["sha256"] == Calibration.from_json(json.loads(json.dumps(again.to_json()))).to_json()["sha256"]
    assert again.probes[next(iter(again.probes))]["points"][0]["ns"] in (3.0, 0.5, 1.0)
    exact, other = find("GPU A", lib.digest, "float32", paths=[path])
    assert exact.gpu == "GPU A" and other is not None
    exact, other = find("GPU C", lib.digest, "float32", paths=[path])
    assert exact is None and other.gpu == "GPU A"                      # another GPU: only a fallback
    assert find("GPU A", "0000", "float32", paths=[path]) == (None, None)   # another library
    assert find("GPU A", lib.digest, "float64", paths=[path])[0] is None


@pytest.mark.parametrize("text, match", [
    ("not json {", "not a readable"),
    (json.dumps({"format": "something-else", "version": 1, "entries": []}), "not a kfuse calibration"),
    (json.dumps({"format": "kfuse-calibration", "version": 99, "entries": []}), "another version"),
])
def test_foreign_or_corrupt_file_is_reported_and_ignored(tmp_path, lib, text, match):
    path = tmp_path / "cal.json"
    path.write_text(text)
    warnings = []
    assert read_file(path, warnings.append) == []
    assert match in warnings[0]
    with pytest.raises(CalibrationError, match="refusing to overwrite"):
        write_entry(path, synthetic(lib, flat()))
    assert path.read_text() == text


def test_tampered_entry_is_never_trusted(tmp_path, lib):
    path = tmp_path / "cal.json"
    write_entry(path, synthetic(lib, flat(), gpu="GPU A"))
    write_entry(path, synthetic(lib, flat(), gpu="GPU B"))
    data = json.loads(path.read_text())
    pid = next(iter(data["entries"][0]["probes"]))
    data["entries"][0]["probes"][pid]["points"][0]["ns"] = 0.0         # edited, checksum not updated
    data["entries"][1]["launch_ns"] = "fast"                             # and a malformed one, re-signed
    data["entries"][1]["sha256"] = store._digest(data["entries"][1])
    path.write_text(json.dumps(data))
    warnings = []
    assert read_file(path, warnings.append) == []
    assert "checksum mismatch" in warnings[0] and "malformed" in warnings[1]


def test_entry_referring_to_unmeasured_probes_is_refused(lib):
    rec = synthetic(lib, flat()).to_json()
    rec["probes"].pop(next(iter(rec["probes"])))
    rec["sha256"] = store._digest(rec)
    with pytest.raises(CalibrationError, match="unmeasured"):
        Calibration.from_json(rec)


# ---- model choice and notices ----------------------------------------------------------------
def test_no_calibration_falls_back_to_the_transfer_model_with_one_notice(lib):
    msgs = []
    assert choose_model(lib, "float32", warn=msgs.append) is DEFAULT_MACHINE
    assert choose_model(lib, "float32", warn=msgs.append) is DEFAULT_MACHINE
    assert len(msgs) == 1
    assert msgs[0] == (f"kfuse: no calibration of this library: plans are ranked with the transfer model (library "
                       f"{lib.digest}, float32); run `kfuse calibrate` on a GPU, with --library DIR for your own library")


def test_shipped_calibration_is_used_with_a_notice(tmp_path, lib):
    write_entry(tmp_path / "shipped" / "H100.json", synthetic(lib, flat(), gpu="NVIDIA H100 80GB HBM3"))
    msgs = []
    model = choose_model(lib, "float32", warn=msgs.append)
    assert isinstance(model, CalibratedModel) and model.cal.gpu == "NVIDIA H100 80GB HBM3"
    assert msgs == ["kfuse: no GPU here: plans are ranked with the shipped NVIDIA H100 80GB HBM3 calibration "
                    f"(library {lib.digest}, float32)"]
    # a dtype the calibration does not cover: the transfer model, with a notice
    msgs.clear()
    assert choose_model(lib, "float64", warn=msgs.append) is DEFAULT_MACHINE and "transfer model" in msgs[0]


A100 = {"sms": 108, "max_threads_per_sm": 2048, "smem_per_sm": 167936, "smem_optin": 166912,
        "max_blocks_per_sm": 32, "smem_reserved": 1024}


def test_another_gpus_calibration_takes_this_gpus_multiprocessor_facts(tmp_path, lib, monkeypatch):
    """A borrowed calibration keeps its measured times but plans with the SMs, threads and shared
    memory of the GPU at hand: the runtime's grids and serial iterations follow them.  So does the
    transfer model."""
    from kfuse.runtime import gpu
    h100 = synthetic(lib, flat(), gpu="NVIDIA H100 80GB HBM3")
    write_entry(tmp_path / "shipped" / "H100.json", h100)
    monkeypatch.setattr(gpu, "gpu_name", lambda: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(gpu, "current_device_info", lambda: dict(A100))
    msgs = []
    model = choose_model(lib, "float32", warn=msgs.append)
    assert msgs[0].startswith("kfuse: no calibration of this NVIDIA A100-SXM4-80GB: plans are ranked with the shipped "
                              f"NVIDIA H100 80GB HBM3 calibration (library {lib.digest}, float32), with this GPU's "
                              "108 multiprocessors")
    assert model.cal.gpu == h100.gpu and model.cal.probes == h100.probes
    assert {k: model.cal.device[k] for k in A100} == A100
    assert h100.device["sms"] == 132        # the calibration read from disk is not changed
    # the search's serial iterations are the A100's launch: two waves of its 108 SMs
    prog = kfuse.compile(GEMV, dtype="float32", sizes={"A.rows": 8192, "A.cols": 8192}, tuned=False,
                        calibration=True)
    code = prog.search.ranked[next(iter(prog.search.ranked))][0][2]
    got = prog.search.ranker.iterations(code)
    assert got == code.launch.iterations(prog.search.dims, target_blocks(108, 2048, code.launch.threads))
    assert got != code.launch.iterations(prog.search.dims, target_blocks(132, 2048, code.launch.threads))
    # the transfer model (no calibration of the library, or calibration=False): the same facts
    plain = kfuse.compile(GEMV, dtype="float32", sizes={"A.rows": 8192, "A.cols": 8192}, tuned=False,
                          calibration=False)
    assert plain.search.model.sms == 108 and plain.search.model.device["sms"] == 108
    assert "108 multiprocessors" in plain.search.model.name
    code = plain.search.ranked[next(iter(plain.search.ranked))][0][2]
    assert plain.search.ranker.iterations(code) == code.launch.iterations(
        plain.search.dims, target_blocks(108, 2048, code.launch.threads))
    assert choose_model(lib, "float64", warn=[].append).sms == 108
    # the calibration's own GPU, or no GPU: its facts as measured
    monkeypatch.setattr(gpu, "current_device_info", lambda: None)
    assert kfuse.compile(GEMV, dtype="float32", sizes={"A.rows": 8192, "A.cols": 8192}, tuned=False,
                         calibration=False).search.model is DEFAULT_MACHINE
    from kfuse.cost.transfer import H100_FACTS
    monkeypatch.setattr(gpu, "current_device_info", lambda: dict(H100_FACTS))
    assert calibrated.transfer_on_this_gpu() is DEFAULT_MACHINE
    calibrated._noticed.clear()
    assert choose_model(lib, "float32", warn=[].append).cal.device == h100.device
    monkeypatch.setattr(gpu, "gpu_name", lambda: h100.gpu)
    monkeypatch.setattr(gpu, "current_device_info", lambda: dict(A100))
    assert choose_model(lib, "float32", warn=[].append).cal.device == h100.device


def test_user_library_is_not_covered_by_the_shipped_calibration(tmp_path, lib):
    write_entry(tmp_path / "shipped" / "H100.json", synthetic(lib, flat(), gpu="NVIDIA H100 80GB HBM3"))
    f = scal_function()
    f["name"], f["aliases"] = "myscal", []
    mine = kfuse.load_library(make_library(tmp_path / "mylib", [f]))
    assert mine.digest != lib.digest
    msgs = []
    assert choose_model(mine, "float32", warn=msgs.append) is DEFAULT_MACHINE
    assert "--library DIR" in msgs[0]


def test_calibration_env_var_selects_or_disables(tmp_path, lib, monkeypatch):
    path = tmp_path / "mine.json"
    write_entry(path, synthetic(lib, flat(), gpu="Some GPU"))
    monkeypatch.setenv("KFUSE_CALIBRATION", str(path))
    msgs = []
    assert isinstance(choose_model(lib, "float32", warn=msgs.append), CalibratedModel)
    assert "plans are ranked with the Some GPU calibration in" in msgs[0]
    monkeypatch.setenv("KFUSE_CALIBRATION", "off")
    assert choose_model(lib, "float32", warn=msgs.append) is DEFAULT_MACHINE


# ---- prediction arithmetic -------------------------------------------------------------------
def one_call_kernel(lib, script, variant, ipb=8, unroll=1, macros=()):
    prog = parse_script(script, lib)
    call = prog.calls[0]
    var = next(v for v in call.function.variants if v.name == variant)
    spec = KernelSpec("k", (KernelCall(call, var, macros),), ipb=ipb, unroll=unroll,
                      stores=frozenset(v.id for v in call.outputs))
    return prog, build_kernel(spec, lib)


def test_kernel_time_is_max_of_transfer_and_compute_plus_launch(lib):
    prog, code = one_call_kernel(lib, "vector x, y, z; input x, y; z = vadd(x, y); return z;", "warp")
    dims = {d.id: 2**20 for d in prog.dims}
    inst = 2**20 // 32
    for comp, expect_ns in ((0.5, 7.0 * inst), (10.0, 10.0 * inst)):
        cal = synthetic(lib, lambda keys, p, env: {"load": 2.0, "compute": comp, "store": 3.0}[p.kind],
                        launch_ns=2000.0)
        model = CalibratedModel(cal)
        parts = model.kernel_parts(code, dims, 4)
        assert parts["transfer"] == pytest.approx(7.0 * inst * 1e-9)
        assert parts["compute"] == pytest.approx(comp * inst * 1e-9)
        assert parts["clears"] == 0
        assert model.kernel_time(code, dims, {}, 4) == pytest.approx((expect_ns + 2000.0) * 1e-9)


def test_post_loop_stores_run_once_per_block_slot_and_clears_count(lib):
    prog, code = one_call_kernel(lib, "vector x, y; scalar s; input x, y; s = dot(x, y); return s;", "warp")
    dims = {d.id: 2**22 for d in prog.dims}
    cal = synthetic(lib, lambda keys, p, env: {"load": 1.0, "compute": 0.0, "store": 100.0}[p.kind],
                    launch_ns=1000.0, clear_ns=500.0)
    model = CalibratedModel(cal)
    L = code.launch
    iters = L.iterations(dims, target_blocks(cal.device["sms"], cal.device["max_threads_per_sm"], L.threads))
    slots = L.grid(dims, iters) * code.spec.ipb
    inst = 2**22 // 32
    assert [s.phase for s in code.steps if s.routine is not None and s.routine.kind == "store"] == ["post"]
    parts = model.kernel_parts(code, dims, 4)
    assert parts["transfer"] == pytest.approx((2 * inst + 100.0 * slots) * 1e-9)
    assert parts["clears"] == pytest.approx(500e-9) and parts["launch"] == pytest.approx(1000e-9)


def test_interpolation_of_instances_per_block_unroll_and_occupancy(lib):
    def cost(keys, p, env):
        return {8: 1.0, 32: 3.0}.get(env.ipb, 1.0) * (1.0 if env.unroll == 1 else 0.5)
    model = CalibratedModel(synthetic(lib, cost, half=3.0))
    _, probes = library_probes(lib)
    pid = next(p.id for p in probes.values() if p.nesting == 1 and p.kind == "load" and p.ipbs == (8, 32))
    assert model.routine_ns(pid, "i", 1, 16, 1.0) == pytest.approx(2.0)        # log2-linear in ipb
    assert model.routine_ns(pid, "i", 1, 4, 1.0) == pytest.approx(1.0)         # clamped
    assert model.routine_ns(pid, "i", 4, 8, 1.0) == pytest.approx(0.5)         # measured unroll
    assert model.routine_ns(pid, "i", 8, 8, 1.0) == pytest.approx(0.5)         # clamped unroll
    quick = CalibratedModel(synthetic(lib, lambda k, p, e: 1.0 if e.unroll == 1 else 0.4, quick=True))
    assert quick.routine_ns(pid, "i", 2, 8, 1.0) == pytest.approx(0.8)         # linear between 1 and 4
    assert model.routine_ns(pid, "i", 1, 8, 0.5) == pytest.approx(3.0)         # measured at half
    assert model.routine_ns(pid, "i", 1, 8, 0.25) == pytest.approx(7.0)        # linear in 1/occupancy
    assert model.routine_ns(pid, "i", 4, 8, 0.5) == pytest.approx(1.5)         # slowdown applied to unroll 4
    dev = model.cal.device
    assert resident_fraction(dev, 256, 0) == 1.0
    assert resident_fraction(dev, 32, 0) == 0.5                                # 32 blocks at most
    assert resident_fraction(dev, 256, 100 * 1024) == pytest.approx(2 * 256 / 2048)


# ---- ranking -------------------------------------------------------------------------------
@pytest.mark.parametrize("cheap", ["smem", "shfl"])
def test_a_calibration_that_makes_a_variant_cheaper_is_followed(lib, cheap):
    cal = synthetic(lib, lambda keys, p, env: 0.1 if any(f"/{cheap}/" in k for k in keys) else 5.0)
    prog = kfuse.compile(GEMV, calibration=CalibratedModel(cal), tuned=False)
    assert {kc.variant.name for k in prog.plan.kernels for kc in k.calls} == {cheap}
    assert prog.search.model.name.startswith("calibrated model")


@pytest.mark.parametrize("by", [2, 16])
def test_a_calibration_that_makes_a_block_size_cheaper_is_followed(lib, by):
    cal = synthetic(lib, lambda keys, p, env: 0.1 if dict(p.macros).get("BY") == by else 5.0)
    prog = kfuse.compile(GEMV, calibration=CalibratedModel(cal), tuned=False)
    assert [dict(kc.macros)["BY"] for k in prog.plan.kernels for kc in k.calls] == [by]


def test_calibration_file_path_and_unknown_library(tmp_path, lib):
    path = tmp_path / "cal.json"
    write_entry(path, synthetic(lib, flat(), gpu="GPU A"))
    prog = kfuse.compile(GEMV, calibration=path, tuned=False)
    assert isinstance(prog.search.model, CalibratedModel)
    with pytest.raises(KfuseError, match="no valid calibration"):
        kfuse.compile(GEMV, calibration=path, dtype="float64", tuned=False)
    # a calibration that lacks a routine of the plan says so, and prices those kernels by the
    # transfer model (a function added to the library after the calibration still plans)
    partial = synthetic(lib, flat(), routines=set())
    seen: list[str] = []
    from kfuse.cost import calibrated
    calibrated._noticed.clear()
    import logging
    logging.getLogger("kfuse").addHandler(handler := logging.Handler())
    handler.emit = lambda record: seen.append(record.getMessage())    # type: ignore[method-assign]
    try:
        prog = kfuse.compile(GEMV, calibration=CalibratedModel(partial), tuned=False)
    finally:
        logging.getLogger("kfuse").removeHandler(handler)
    assert any("has no measurement of gemv" in m and "transfer model" in m for m in seen), seen
    assert prog.kernels


def test_calibrated_plan_search_still_ranks_every_plan(lib):
    from conftest import ROOT
    cal = synthetic(lib, lambda keys, p, env: {"load": 1.0, "compute": 0.1, "store": 1.2}[p.kind] / env.unroll)
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf", calibration=CalibratedModel(cal), tuned=False)
    costs = [p.predicted for p in __import__("itertools").islice(prog.search.plans(), 50)]
    assert costs == sorted(costs) and all(math.isfinite(c) and c > 0 for c in costs)


# ---- report and CLI --------------------------------------------------------------------------
def test_report_tables():
    r = SequenceResult("BiCGK", plans=820, fusion_impls=36, measured=[(1, 120.0, 130.0), (2, 121.0, 113.0),
                                                                       (3, 125.0, 150.0)],
                       first_s=0.1, all_s=0.4, search_s=6.0, compile_s=3.5)
    text = markdown([r], {"gpu": "G", "dtype": "float32", "n": 8192, "N": 2**26, "top": 3, "reps": 20, "model": "m"})
    assert "| BiCGK | 820 | 36 | 3 | 2 | 1.150 | – | 1.327 |" in text
    assert "| BiCGK | 0.100 | 0.400 | 6.0 (3.5) |" in text
    assert "First choice / best over 1 sequences: median 1.150, 90th percentile 1.150, worst 1.150; " \
           "within 5 % of the best: 0 of 1." in text
    assert "(re-timed)" not in text and "Re-timed:" not in text
    # timed again in turns, the first choice is within 2 % of the best
    r.retimed = (116.0, 113.7)
    text = markdown([r], {"gpu": "G", "dtype": "float32", "n": 8192, "N": 2**26, "top": 3, "reps": 20, "model": "m",
                          "rounds": 5})
    assert "| BiCGK | 820 | 36 | 3 | 2 | 1.150 | 1.020 | 1.327 |" in text
    assert "5 rounds" in text and "within 5 % of the best: 1 of 1." in text
    r.summaries = ["p1", "p2", "p3"]
    assert r.to_json()["retimed"] == {"first_us": 116.0, "best_us": 113.7}
    assert "| BiCGK | 120.0 / 130.0 | 121.0 / 113.0 (2) |" in text


def test_cli_calibrate_without_gpu_says_so(capsys):
    from kfuse.cli.main import main
    assert main(["calibrate", "--quick"]) == 1
    assert "calibrate measures routines on a GPU" in capsys.readouterr().err


def test_cli_plan_names_the_model(capsys):
    from conftest import ROOT
    from kfuse.cli.main import main
    assert main(["plan", str(ROOT / "examples" / "bicgk.kf")]) == 0
    out = capsys.readouterr()
    assert "ranked by the transfer model" in out.out and "plans are ranked with the transfer model" in out.err


# ---- the host side of kfuse calibrate, on a CuPy stand-in ------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_calibrate_host_side_on_a_cupy_stand_in(lib, dtype, monkeypatch, tmp_path):
    from cupy_standin import CuPyStandIn
    import kfuse.calibration.measure as measure
    import kfuse.runtime.compiler as compiler
    import kfuse.runtime.timing as timing
    import kfuse.runtime.gpu as gpu
    cp = CuPyStandIn(dtype)
    for mod in (measure, compiler, timing, gpu):
        monkeypatch.setattr(mod, "cupy", lambda: cp)
    monkeypatch.setattr(gpu, "gpu_name", lambda: "Stand-in GPU")
    monkeypatch.setattr(compiler, "_modules", {})
    lines = []
    cal = measure.calibrate(lib, dtype, quick=True, log=lines.append, kernels=False)   # micro-kernels only
    keys, probes = library_probes(lib)
    assert cal.routines == keys and set(cal.probes) == set(probes)
    half = [n for n, _, _, smem in cp.launches if n.endswith("_half")]
    assert half and all(smem > 0 for n, _, _, smem in cp.launches if n.endswith("_half"))
    for pid, p in probes.items():
        pts = cal.probes[pid]["points"]
        assert {(q["loop"], q["unroll"], q["ipb"]) for q in pts if q["occupancy"] == "full"} == \
               {(e.loop, e.unroll, e.ipb) for e in p.environments(quick=True) if e.occupancy == "full"}
        assert all(q["resident"] < 1.0 for q in pts if q["occupancy"] == "half")
    assert any("compiling (NVRTC)" in m for m in lines) and any("timing" in m for m in lines)
    write_entry(tmp_path / "cal.json", cal)
    [back] = read_file(tmp_path / "cal.json")
    assert back.key == ("Stand-in GPU", lib.digest, dtype) and back.meta["quick"] is True
    # a second run reuses every probe and only re-times launch, clears and barriers
    cp.launches.clear()
    again = measure.calibrate(lib, dtype, quick=True, reuse=[back], log=lines.append, kernels=False)
    assert again.probes == back.probes
    assert {n.split("_")[1] for n, *_ in cp.launches if n != "kfc_empty"} == {
        p.id for _, _, p, _ in barrier_probes(probes)}
    assert set(again.barrier_ns) == {1, 2}
    assert set(again.barrier_ns[2]) == {t for n, t, _, _ in barrier_probes(probes) if n == 2}


def test_a_calibration_equivalent_to_the_transfer_model_predicts_what_it_predicts(lib):
    """Loads and stores costing their bytes over the transfer model's bandwidth (vectors of nested
    functions from L2, free), no atomics or barriers: the calibrated prediction of each example's
    plan matches the transfer model's (within 1%) -- the executions are counted right."""
    from dataclasses import replace as dreplace
    from conftest import EXAMPLES
    machine = dreplace(DEFAULT_MACHINE, atomic=0.0, barrier=0.0)

    def cost(keys, p, env):
        if p.kind == "compute":
            return 0.0
        entries = sum(math.prod(a.shape) if a.shape else 1 for kind, a in p.args if kind == "element")
        if p.nesting == 2 and not any(a.kind == "tile" for kind, a in p.args if kind == "element"):
            return 0.0
        return entries * 4 / machine.bandwidth * 1e9
    model = CalibratedModel(synthetic(lib, cost, launch_ns=machine.launch * 1e9, clear_ns=machine.clear * 1e9))
    for path in EXAMPLES:
        prog = kfuse.compile(path, calibration=machine, tuned=False)
        dims, entries = prog.search.dims, prog.search.entries
        for code in prog.kernels:
            # plus the contention of atomic partial stores, which calibration does not measure
            want = (machine.kernel_time(code, dims, entries, 4)
                    + atomic_warps(code, dims) * DEFAULT_MACHINE.atomic)
            assert model.kernel_time(code, dims, entries, 4) == pytest.approx(want, rel=0.01), (path.stem, code.spec.name)


def test_report_measures_the_top_plans_in_predicted_order(monkeypatch):
    """run_report on the CPU, with the GPU measurement replaced: ranks, ratios and times."""
    import kfuse.tuning.measure as measure
    from conftest import ROOT
    from kfuse.bench.prediction import run_report
    seen = {}

    def fake_measure(compiled, plans, dims, reps=30, log=None, label="tune"):
        seen["dims"], seen["n"] = dims, len(plans)
        # the third plan is measured fastest, the second is wrong
        times = {0: 110.0, 2: 100.0}
        return [(times.get(k, 120.0 + k), k, None) for k in range(len(plans)) if k != 1], 0.5

    def fake_retime(compiled, plans, dims, reps=20, rounds=5):
        seen["retimed"] = ([p.summary() for p in plans], rounds)
        return [104.0, 101.0]
    monkeypatch.setattr(measure, "measure_plans", fake_measure)
    monkeypatch.setattr(measure, "retime", fake_retime)
    checkpoints = []
    results, header = run_report([ROOT / "examples" / "bicgk.kf"], n=4096, top=5, reps=3,
                                 log=lambda m: None, checkpoint=lambda r, h: checkpoints.append(len(r)), rounds=4)
    [r] = results
    assert seen["n"] == 5 and sorted(seen["dims"].values()) == [4096, 4096]
    assert r.plans == kfuse.compile(ROOT / "examples" / "bicgk.kf", tuned=False,
                                    sizes={"A.rows": 4096, "A.cols": 4096}).search.count_plans()   # strips fit per size
    assert r.wrong == 1 and [m[0] for m in r.measured] == [1, 3, 4, 5]
    assert r.best[0] == 3 and r.first_over_best() == pytest.approx(1.1)
    assert r.worst_over_best() == pytest.approx(1.24)
    assert 0 < r.first_s <= r.all_s and r.compile_s == 0.5 and checkpoints == [1]
    assert header["model"].startswith("transfer model") and header["top"] == 5
    text = markdown(results, header)
    assert f"| BiCGK | {r.plans} | {r.fusion_impls} | 4 (1 wrong) | 3 | 1.100 | 1.030 | 1.240 |" in text
    # the first plan and the third (the measured best) were timed again, 4 rounds
    assert seen["retimed"] == ([r.summaries[0], r.summaries[2]], 4) and header["rounds"] == 4


def test_tune_replaces_kernels_one_at_a_time(monkeypatch):
    """tune on the CPU, with the GPU measurement replaced by times that add per kernel: after the
    plan search, a faster implementation of GEMVER's first kernel and a faster serial-iteration
    count of its second are each found and combined; slower alternatives are not taken."""
    from dataclasses import replace

    import kfuse.tuning.search as search
    from conftest import ROOT
    compiled = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)
    first = next(compiled.search.plans())
    k0, k1 = first.kernels
    calls0 = frozenset(kc.call.index for kc in k0.calls)
    faster0 = compiled.search.ranked[calls0][3][1].spec(compiled.program, k0.name, k0.stores)
    labels = []

    def fake_measure(compiled, plans, dims, reps=30, log=None, label="tune"):
        labels.append(label)
        def us(plan):
            a, b = plan.kernels
            return ((190.0 if replace(a, iters=0) == faster0 else 200.0) + (a.iters == 8) * 7.0
                    + (90.0 if b.iters == 4 else 100.0))
        return [(us(p), n, compiled.with_plan(p)) for n, p in enumerate(plans)], 0.0
    monkeypatch.setattr(search, "measure_plans", fake_measure)
    logs = []
    tuned = search.tune(compiled, top=5, store=False, log=logs.append)
    a, b = tuned.plan.kernels
    assert replace(a, iters=0) == faster0 and a.iters == 0 and b.iters == 4
    assert replace(b, iters=0) == replace(k1, iters=0)
    assert labels == ["tune", "kernels", "kernels", "iterations", "iterations"]
    assert any("kernel by kernel" in m and "kernel(s) 0 replaced: 290.0 us (was 300.0)" in m for m in logs)
    assert any("serial iterations kernel 1: 4: 280.0 us (was 290.0)" in m for m in logs)


def test_probes_of_a_variant_of_two_routine_files_include_both_keyed_by_their_own(nvcc, tmp_path):
    """A variant whose routines come from two files (``source = [a, b]``): its probes' module
    includes every file of the variant (a store defined in the second file builds; before, the
    module held the first file only and nvcc failed), and each probe is keyed by the file that
    defines its routine (editing the second file keeps the loads' measurements)."""
    from pathlib import Path
    from kfuse.library.loader import load_library
    exp = Path(__file__).resolve().parent / "data" / "bandlib"          # the row-band experiment's library
    band_src = (exp / "band.cu").read_text()
    store_src = band_src[band_src.index("// the band's R row results"):]

    def probes_of(root, extra=""):
        root.mkdir()
        (root / "strip.cu").write_text(band_src[:band_src.index("// the band's R row results")])
        (root / "band.cu").write_text(store_src + extra)
        (root / "band.toml").write_text((exp / "band.toml").read_text().replace(
            'source = "band.cu"', 'source = ["strip.cu", "band.cu"]'))
        lib = load_library(root, shipped=False)
        routines, probes = library_probes(lib)
        return lib, {k: probes[pid] for k, pid in routines.items()}

    lib, band = probes_of(tmp_path / "a")
    assert {Path(p.source).name for k, p in band.items() if k.endswith("/store_out")} == {"band.cu"}
    assert {Path(p.source).name for k, p in band.items() if k.endswith("/load_A")} == {"strip.cu"}
    _, edited = probes_of(tmp_path / "b", "\n// an edit\n")
    assert all((edited[k].id == p.id) == (not k.endswith("/store_out")) for k, p in band.items())
    subset = [(p, p.environments()[0]) for p in {p.id: p for p in band.values()}.values()]
    nvcc_compile(nvcc, probe_module(lib, "float64", subset), tmp_path, "band_probes", optimise=False)


def test_a_load_declared_to_overlap_is_priced_beside_the_streamed_ones(lib):
    """The band's load of x (re-read by every band of the rows, from L2) overlaps its load of A:
    transfer = max(streamed loads + stores, overlapping loads), not their sum."""
    prog = parse_script("matrix A; vector x, y; input A, x; y = gemv(A, x); return y;", lib)
    call = prog.calls[0]
    band = next(v for v in call.function.variants if v.name == "band")
    code = build_kernel(KernelSpec("k", (KernelCall(call, band, (("BY", 8), ("R", 2), ("NC", 2048))),), ipb=1,
                                   loop="j", stores=frozenset(v.id for v in call.outputs)), lib)
    dims = {d.id: 8192 for d in prog.dims}
    inst = (8192 // 2) * (8192 // 2048)
    transfer = {}
    for x_ns in (0.0, 1.5, 5.0):
        def cost(keys, p, env, x_ns=x_ns):
            if p.kind == "load":
                return x_ns if any(k.endswith("/load_x") for k in keys) else 2.0
            return 0.0
        transfer[x_ns] = CalibratedModel(synthetic(lib, cost)).kernel_parts(code, dims, 4)["transfer"]
    assert transfer[0.0] == pytest.approx(2.0 * inst * 1e-9)
    assert transfer[1.5] == transfer[0.0]                        # hidden behind A's loads
    assert transfer[5.0] == pytest.approx(5.0 * inst * 1e-9)     # longer than them: it sets the time


def test_report_measures_an_alternative_models_first_choice(monkeypatch):
    """--alt-launch-ns/--alt-clear-ns: the alternative model's first choice is measured with the
    top K (added where it is not among them) and set against the same best."""
    import kfuse.tuning.measure as measure
    from conftest import ROOT
    from kfuse.bench.prediction import alternative_model, run_report
    from kfuse.cost.transfer import DEFAULT_MACHINE
    counts = []

    def fake_measure(compiled, plans, dims, reps=30, log=None, label="tune"):
        counts.append(len(plans))
        return [(100.0 + 10 * k, k, None) for k in range(len(plans))], 0.1
    monkeypatch.setattr(measure, "measure_plans", fake_measure)
    alt = alternative_model(DEFAULT_MACHINE, 1.0, 2.0)
    assert alt.launch == pytest.approx(1e-9) and alt.clear == pytest.approx(2e-9) and alt.bandwidth == DEFAULT_MACHINE.bandwidth
    results, header = run_report([ROOT / "examples" / "gemver.kf"], n=1024, top=2, reps=3, log=lambda m: None,
                                 alt_launch_ns=1.0, alt_clear_ns=1.0)
    [r] = results
    assert "alternative" in header and r.alt_rank is not None and 1 <= r.alt_rank <= counts[0] <= 3
    assert r.alt_over_best() == pytest.approx((100.0 + 10 * (r.alt_rank - 1)) / 100.0)
    assert set(r.alt_predicted) == {k for k, _, _ in r.measured} and all(v > 0 for v in r.alt_predicted.values())
    text = markdown(results, header)
    assert "Alternative model:" in text and "of the alternative model" in text and "alternative: median" in text
    plain, _ = run_report([ROOT / "examples" / "gemver.kf"], n=1024, top=2, reps=3, log=lambda m: None)
    assert plain[0].alt_rank is None and counts[-1] == 2
