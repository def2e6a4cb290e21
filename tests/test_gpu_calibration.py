"""Calibration on the GPU: one function end to end, and the report (run with -m gpu)."""
from dataclasses import replace

import pytest

import kfuse
from kfuse.cost.calibrated import CalibratedModel
from kfuse.calibration.probes import function_key, library_probes, macro_choices
from kfuse.cost.store import read_file, write_entry

from conftest import ROOT

pytestmark = pytest.mark.gpu

GEMV = "matrix A[n, n]; vector x[n], y[n]; input A, x; y = gemv(A, x); return y;"


def test_calibrate_one_function_end_to_end(tmp_path, lib):
    from kfuse.calibration.measure import calibrate
    from kfuse.tuning.measure import measure_plans
    sub = replace(lib, functions=tuple(f for f in lib.functions if function_key(f) == "gemv(A,x)"))
    lines = []
    cal = calibrate(sub, "float32", quick=True, log=lines.append)
    assert any("done in" in m for m in lines)
    path = tmp_path / "cal.json"
    write_entry(path, cal)
    [back] = read_file(path)
    assert back.key == cal.key and back.routines == cal.routines
    # every routine of every macro choice the builder accepts (strips narrower than 4 x threads
    # are refused: probes.library_probes), and at least one choice of every variant
    [gemv] = sub.functions
    expected, _ = library_probes(sub)
    assert all(k.startswith("gemv(A,x)/") for k in back.routines) and set(back.routines) == set(expected)
    assert {k.split("/")[1] for k in back.routines} == {v.name for v in gemv.variants if not v.cluster}
    assert len(back.routines) <= sum(len(macro_choices(v)) * len(v.routines) for v in gemv.variants)
    assert 0 < back.launch_ns < 50_000
    for pid, data in back.probes.items():
        assert data["points"] and all(p["ns"] >= 0 for p in data["points"])
    loads = [p["ns"] for d in back.probes.values() if d["kind"] == "load" for p in d["points"]
             if p["occupancy"] == "full"]
    assert max(loads) > 0.05                    # a 4 KB tile takes more than 50 ps at any bandwidth
    prog = kfuse.compile(GEMV, calibration=CalibratedModel(back), sizes={"n": 4096}, tuned=False)
    results, _ = measure_plans(prog, [prog.plan], prog.search.dims, reps=30, log=lines.append)
    [(measured_us, _, _)] = results
    predicted_us = prog.plan.predicted * 1e6
    assert 0.5 < predicted_us / measured_us < 2.0, (predicted_us, measured_us)


def test_report_on_one_sequence(tmp_path):
    from kfuse.bench.prediction import markdown, run_report
    results, header = run_report([ROOT / "examples" / "sscal.kf"], n=1024, N=2**22, top=3, reps=5,
                                 log=lambda m: None)
    [r] = results
    assert len(r.measured) == 3 and r.best is not None and r.first_over_best() >= 1.0
    text = markdown(results, header)
    assert "| SSCAL |" in text and "Table 4" in text and "Table 5" in text


def test_kernel_factors_of_a_sparse_mat_vec_and_a_stencil(lib):
    """The functions no micro-kernel stands for are timed whole (calibration/kernels.py): their
    factors are plausible, and a model with them prices spmv and lap7 without the notice."""
    import logging
    from kfuse.calibration.kernels import MEANS
    from kfuse.cost import calibrated
    sub = replace(lib, functions=tuple(f for f in lib.functions if f.name in ("spmv", "lap7")))
    lines = []
    cal = calibrate_quick(sub, lines)
    assert set(k.split("(")[0] for k in cal.kernels) == {"spmv", "lap7"}
    spmv = next(v for k, v in cal.kernels.items() if k.startswith("spmv"))
    assert [p[0] for p in spmv["points"]] == [float(m) for m in MEANS[True]]
    assert all(0.3 < f < 50 for v in cal.kernels.values() for _, f in v["points"])
    seen = []
    calibrated._noticed.clear()
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())    # type: ignore[method-assign]
    logging.getLogger("kfuse").addHandler(handler)
    try:
        progs = [kfuse.compile("csr A; vector x, y; input A, x; y = spmv(A, x); return y;",
                               calibration=CalibratedModel(cal), tuned=False),
                 kfuse.compile("vector u[n], v[n]; input u; v = lap7(u); return v;",
                               calibration=CalibratedModel(cal), tuned=False)]
    finally:
        logging.getLogger("kfuse").removeHandler(handler)
    assert not [m for m in seen if "no measurement" in m], seen
    assert all(p.plan.predicted > 0 for p in progs)


def calibrate_quick(sub, lines):
    from kfuse.calibration.measure import calibrate
    return calibrate(sub, "float32", quick=True, log=lines.append)
