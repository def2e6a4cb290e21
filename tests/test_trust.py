"""Data is never run as code nor trusted too far (issue 19): library expressions, sources and
routines, the tuning store, calibration files (CPU)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from kfuse.errors import LibraryError
from kfuse.library import expr
from kfuse.library.loader import SHIPPED, load_library
from test_library import FILE, SOURCE, gemv_function, make_library, scal_function, stub_sources
from kfuse.cost import counts

ROOT = Path(__file__).resolve().parent.parent


def load_error(folder: Path) -> LibraryError:
    with pytest.raises(LibraryError) as info:
        load_library(folder, shipped=False)
    return info.value


# ---- 1. reference and flops: a checked AST interpreter, never eval ---------------------------

ESCAPES = [
    "(lambda: __import__('os').system('touch PWNED'))() or alpha * x",
    "().__class__.__base__.__subclasses__()",
    "alpha * x if __import__('os') else x",
    "[c for c in ().__class__.__mro__]",
    "np.__dict__['sys'].exit()",
    "np.load('x')",
    "x.__class__",
    "alpha * x.tofile('/tmp/pwned')",
    "getattr(x, 'T')",
    "{alpha: x}",
    "x[0]",
    "x ** 10 ** 10",
    "'a' * 3",
]


@pytest.mark.parametrize("text", ESCAPES)
def test_reference_refuses_anything_undocumented_at_load(tmp_path, text):
    f = scal_function()
    f["reference"] = text
    folder = make_library(tmp_path / "lib", [f])
    err = load_error(folder)
    assert err.file == str(folder / FILE) and err.field == "function myscal.reference"
    assert "not allowed" in str(err) or "uses" in str(err) or "**" in str(err), str(err)


FLOPS_ESCAPES = ["().__class__.__base__.__subclasses__()", "x if x else x", "x ** 99999999",
                 "abs(x)", "x / 2", "2.5 * x", "x.T", "[x][0]"]


@pytest.mark.parametrize("text", FLOPS_ESCAPES)
def test_flops_refuses_anything_undocumented_at_load(tmp_path, text):
    f = scal_function()
    f["flops"] = text
    folder = make_library(tmp_path / "lib", [f])
    err = load_error(folder)
    assert err.field == "function myscal.flops" and "function myscal" in str(err)


def test_expressions_are_checked_again_when_evaluated(gemver):
    """A Function built without the loader cannot smuggle code into flops or reference."""
    import dataclasses

    from kfuse.reference import evaluate, random_inputs
    call = gemver.program.calls[0]
    fn = call.function
    dims = {d.id: 8 for d in gemver.program.dims}
    inputs = random_inputs(gemver.program, dims, seed=1)
    try:
        for field in ("flops", "reference"):
            bad = dataclasses.replace(fn, **{field: "().__class__.__base__.__subclasses__()"})
            object.__setattr__(call, "function", bad)
            with pytest.raises(KfuseError, match="not allowed"):
                counts.flops(gemver.program, dims) if field == "flops" else evaluate(gemver.program, inputs)
    finally:
        object.__setattr__(call, "function", fn)


def test_refusal_names_the_construct(tmp_path):
    f = scal_function()
    f["reference"] = "().__class__.__base__.__subclasses__()"
    err = load_error(make_library(tmp_path / "lib", [f]))
    assert "__subclasses__" in str(err) and "not allowed" in str(err)


def test_expressions_never_reach_eval(monkeypatch, lib):
    """Reference and flops of a compiled script are computed without Python's eval."""
    import builtins

    import kfuse
    from kfuse.reference import evaluate, random_inputs
    prog = kfuse.compile((ROOT / "examples" / "gemver.kf").read_text(), dtype="float32", tuned=False)
    dims = {d.id: 64 for d in prog.program.dims}
    inputs = random_inputs(prog.program, dims, seed=1)

    def no_eval(*a, **k):
        raise AssertionError("eval called")
    monkeypatch.setattr(builtins, "eval", no_eval)
    assert counts.flops(prog.program, dims) > 0
    env = evaluate(prog.program, inputs)
    assert all(np.all(np.isfinite(v)) for v in env.values())


def test_shipped_expressions_bit_identical_to_eval(lib):
    rng = np.random.default_rng(3)
    for f in lib.functions:
        if f.reference is None:         # spmv: the reference evaluator has no sparse matrices
            continue
        # a stencil's vectors are grids, and its reference may call the grid helpers
        shape = {"vector": {0: (40,), 2: (5, 8), 3: (2, 4, 5)}[f.grid], "matrix": (40, 40)}
        scope = {p.name: float(rng.standard_normal()) if p.type == "scalar" else rng.standard_normal(shape[p.type])
                 for p in f.inputs}
        helpers = {"cross": expr.cross, "box": expr.box} if f.grid else {}
        want = eval(f.reference, {"np": np, **helpers, **scope})   # noqa: S307 - the old behaviour, as oracle
        got = expr.evaluate(f.reference, scope, f.reference_kind)
        assert np.array_equal(np.asarray(got), np.asarray(want)), f.name
        n = {p.name: 1000 + i for i, p in enumerate(f.params)}
        assert expr.evaluate(f.flops, n, "flops") == eval(f.flops, {"__builtins__": {}}, n)   # noqa: S307


def test_documented_constructs_are_accepted():
    names = frozenset({"alpha", "x", "y", "A"})
    for text in ["alpha * (A.T @ x) + y", "np.outer(x, y)", "np.sum(A, axis=0) - -x", "abs(alpha) * x",
                 "np.abs(x) / 2", "x ** 2", "(x + y, np.dot(x, y))", "1e999 * x"]:
        expr.check(text, names, "reference")
    with pytest.raises(expr.ExprError):
        expr.check("(" * 300 + "x" + ")" * 300, names, "reference")
    with pytest.raises(expr.ExprError):
        expr.check("-" * 5000 + "x", names, "reference")


# ---- 2. sources stay inside the library folder -------------------------------------------------

@pytest.mark.parametrize("source", ["../../../etc/hostname", "/etc/hostname", "sub/fn.cu", "../fn.cu"])
def test_source_outside_the_folder_is_refused(tmp_path, source):
    f = scal_function()
    f["variant"][0]["source"] = source
    folder = make_library(tmp_path / "a" / "b" / "c" / "lib", [f])
    (folder / "sub").mkdir()
    (folder / "sub" / "fn.cu").write_text(stub_sources([scal_function()], "")[SOURCE])
    (folder.parent / "fn.cu").write_text(stub_sources([scal_function()], "")[SOURCE])
    (tmp_path / "a" / "etc").mkdir()
    (tmp_path / "a" / "etc" / "hostname").write_text(stub_sources([scal_function()], "")[SOURCE])
    err = load_error(folder)
    assert err.field == "function myscal.variant.warp.source"


def test_source_symlink_out_of_the_folder_is_refused(tmp_path):
    outside = tmp_path / "outside.cu"
    outside.write_text(stub_sources([scal_function()], "")[SOURCE])
    f = scal_function()
    f["variant"][0]["source"] = "link.cu"
    folder = make_library(tmp_path / "lib", [f])
    (folder / "link.cu").symlink_to(outside)
    err = load_error(folder)
    assert err.field == "function myscal.variant.warp.source" and "library folder" in str(err)


# ---- 3. routines checked against the .cu at load time ------------------------------------------

def scal_library(tmp_path, cu: str, f: dict | None = None) -> Path:
    folder = make_library(tmp_path / "lib", [f or scal_function()])
    (folder / SOURCE).write_text(cu)
    return folder


def stub(fn: str, tpl: str = "class V", params: str = "const KfIx& ix, const KfVec& g, V& e",
         body: str = "") -> str:
    return f"template <{tpl}>\nKF_DEVICE void {fn}({params}) {{ {body} }}\n"


SCAL_OK = (stub("blas1_load") + stub("blas1_store", params="const KfIx& ix, V& e, const KfVec& g")
           + stub("scal_compute", "class VX, class VO", "const KfIx& ix, VX& x, VO& out, real alpha"))


def test_scal_stub_library_loads(tmp_path):
    assert load_library(scal_library(tmp_path, SCAL_OK), shipped=False).functions[0].name == "myscal"


def test_routine_missing_from_source(tmp_path):
    cu = SCAL_OK.replace("scal_compute", "scal_kompute")
    err = load_error(scal_library(tmp_path, cu))
    assert err.field == "function myscal.variant.warp.routine.compute.fn"
    assert "scal_compute is not defined in fn.cu" in str(err)


def test_routine_only_in_a_comment_is_missing(tmp_path):
    cu = SCAL_OK.replace("scal_compute", "scal_kompute") + "// template <class V> void scal_compute(a) {}\n"
    assert "scal_compute is not defined" in str(load_error(scal_library(tmp_path, cu)))


def test_template_parameters_must_match_macros(tmp_path):
    g = gemv_function()
    folder = make_library(tmp_path / "lib", [g])
    cu = (folder / SOURCE).read_text()
    assert load_library(folder, shipped=False)
    macro = next(iter(g["variant"][0]["macros"]))
    (folder / SOURCE).write_text(cu.replace(f"int {macro}", "int ROWS"))
    err = load_error(folder)
    assert "template parameters <int ROWS" in str(err) and f"<int {macro}, class ...>" in str(err)
    (folder / SOURCE).write_text(cu.replace(f"int {macro}, ", ""))
    assert "template parameters" in str(load_error(folder))


def test_template_macro_on_a_variant_without_macros(tmp_path):
    cu = SCAL_OK.replace("template <class VX, class VO>", "template <int BY, class VX, class VO>")
    err = load_error(scal_library(tmp_path, cu))
    assert err.field == "function myscal.variant.warp.routine.compute.fn" and "template parameters" in str(err)


def test_routine_parameter_count(tmp_path):
    cu = SCAL_OK.replace("VO& out, real alpha", "VO& out")
    assert "takes 3 parameters" in str(load_error(scal_library(tmp_path, cu)))


@pytest.mark.parametrize("body", ["__syncthreads();", "if (ix.tx) __syncthreads_or(1);", "helper();", "SYNC;"])
def test_routine_calling_a_barrier(tmp_path, body):
    cu = ("#define SYNC __syncthreads()\n"
          "KF_DEVICE void helper() { __syncthreads(); }\n"
          + SCAL_OK.replace("VO& out, real alpha) {", "VO& out, real alpha) { " + body))
    err = load_error(scal_library(tmp_path, cu))
    assert err.field == "function myscal.variant.warp.routine.compute.fn" and "__syncthreads()" in str(err)


def test_barrier_in_a_comment_is_fine(tmp_path):
    cu = SCAL_OK.replace("real alpha) {", "real alpha) { /* no __syncthreads() here */")
    assert load_library(scal_library(tmp_path, cu), shipped=False)


def test_shipped_library_passes_the_routine_checks(lib):
    from kfuse.library import cusource
    for name in ("blas1.cu", "blas2.cu"):
        defs, syncing = cusource.scan((SHIPPED / name).read_text())
        assert defs and not syncing
    assert lib.digest == load_library().digest


@pytest.mark.parametrize("body", ["v = __shfl_xor_sync(0xffffffffu, v, 1);", "v = kf_warp_sum(v);",
                                  "v = helper(v);", "v = LANES(v);"])
def test_routines_exchanging_between_lanes_are_found(tmp_path, body):
    cu = ("#define LANES(v) __shfl_down_sync(0xffffffffu, v, 1)\n"
          "KF_DEVICE real helper(real v) { return kf_lanes_sum<4>(v); }\n"
          + SCAL_OK.replace("VO& out, real alpha) {", "VO& out, real alpha) { real v = 0; " + body))
    [f] = load_library(scal_library(tmp_path, cu), shipped=False).functions
    assert f.variants[0].warp_wide == {"compute"}
    [f] = load_library(scal_library(tmp_path / "plain", SCAL_OK), shipped=False).functions
    assert f.variants[0].warp_wide == frozenset()


def test_prelude_warp_helpers_are_all_known():
    """cusource names the prelude's lane-exchanging helpers (a library source calls them); the
    list is the prelude's own."""
    from kfuse.codegen.module import PRELUDE
    from kfuse.library import cusource
    text = PRELUDE.read_text()
    assert cusource.warp_wide(text) == set(cusource.PRELUDE_WARP_WIDE) | set(cusource.PRELUDE_LANE_SAFE)
    # the lane-safe ones exchange only between the lanes present, whatever subset calls them
    body = text[text.index("KF_DEVICE bool kf_store16_paired(double*"):]
    assert "__activemask()" in body.split("\n}\n")[0] and "0xffffffff" not in body.split("\n}\n")[0]


# ---- 6. library files that cannot be read ------------------------------------------------------

def test_toml_that_is_a_directory(tmp_path):
    folder = make_library(tmp_path / "lib")
    (folder / "more.toml").mkdir()
    err = load_error(folder)
    assert err.file == str(folder / "more.toml")


def test_library_toml_that_is_a_directory(tmp_path):
    folder = make_library(tmp_path / "lib", meta=None)
    (folder / "library.toml").mkdir()
    assert load_error(folder).file == str(folder / "library.toml")


def test_non_utf8_toml(tmp_path):
    folder = make_library(tmp_path / "lib")
    (folder / FILE).write_bytes((folder / FILE).read_bytes() + b"# \xff\xfe\n")
    err = load_error(folder)
    assert err.file == str(folder / FILE) and "UTF-8" in str(err)


def test_non_utf8_cu(tmp_path):
    folder = scal_library(tmp_path, SCAL_OK)
    (folder / SOURCE).write_bytes(SCAL_OK.encode() + b"// \xff\n")
    err = load_error(folder)
    assert err.file == str(folder / SOURCE) and "UTF-8" in str(err)


@pytest.mark.parametrize("nest", ["a = " + "[" * 5000 + "]" * 5000 + "\n",
                                  "a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n"], ids=["arrays", "tables"])
def test_deeply_nested_toml(tmp_path, nest):
    folder = make_library(tmp_path / "lib")
    (folder / "deep.toml").write_text(nest)
    err = load_error(folder)
    assert err.file == str(folder / "deep.toml")


# ---- 4. tuning store and calibration records: every field checked, checksum or not ----------

from kfuse.cost import calibrated, store as cal_store                      # noqa: E402
from kfuse.cost.store import Calibration, read_file, write_entry            # noqa: E402
from kfuse.errors import KfuseError                                         # noqa: E402
from kfuse.ir.plan import plan_from_json, plan_to_json                      # noqa: E402
from kfuse.tuning import store as tstore                                    # noqa: E402
from kfuse.tuning.store import HEADER, TuningStore, store_key               # noqa: E402

from calib_util import synthetic                                           # noqa: E402


@pytest.fixture(scope="module")
def gemver():
    import kfuse
    return kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)


def tkey(prog, gpu="NVIDIA H100 80GB HBM3"):
    return store_key(prog.program, gpu, "float32", prog.search.dims)


def resign(path: Path, mutate) -> None:
    """Append a copy of the last record, changed by ``mutate`` and given a valid checksum."""
    lines = [x for x in path.read_text().splitlines() if x]
    rec = json.loads(lines[-1])
    mutate(rec)
    rec["sha256"] = tstore._digest(rec)
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", ["k0\n#include \"/etc/passwd\"\nint", "k 0", "k0;", "0k", "", "__k", 7])
def test_stored_kernel_name_must_be_an_identifier(tmp_path, gemver, name):
    path = tmp_path / "t.jsonl"
    warnings = []
    st = TuningStore(path, warn=warnings.append)
    st.append(tkey(gemver), gemver.plan, 300.0)
    resign(path, lambda r: (r["plan"][0].__setitem__("name", name), r.__setitem__("time_us", 1.0)))
    assert st.lookup(tkey(gemver))["time_us"] == 300.0          # the re-signed record is not used
    assert any("plan[0].name" in w for w in warnings)
    data = plan_to_json(gemver.plan)
    data[0]["name"] = name
    with pytest.raises(KfuseError, match="name"):
        plan_from_json(gemver.program, data)


@pytest.mark.parametrize("field, value", [("iters", -1), ("ipb", True), ("loop", "k"), ("unroll", 1e300),
                                          ("stores", ["1"]), ("span", 0)])
def test_stored_plan_fields_are_checked(gemver, field, value):
    data = plan_to_json(gemver.plan)
    data[0][field] = value
    with pytest.raises(KfuseError):
        plan_from_json(gemver.program, data)


def test_stored_macro_outside_the_variant_values(gemver):
    data = plan_to_json(gemver.plan)
    c = next(c for k in data for c in k["calls"] if c["macros"])
    m = next(iter(c["macros"]))
    c["macros"][m] = 3
    with pytest.raises(KfuseError, match="do not fit"):
        plan_from_json(gemver.program, data)


def test_record_without_plan_is_a_warning(tmp_path, gemver, monkeypatch):
    import kfuse
    from kfuse.runtime import gpu as rgpu
    path = tmp_path / "t.jsonl"
    warnings = []
    st = TuningStore(path, warn=warnings.append)
    st.append(tkey(gemver, "Fake GPU"), gemver.plan, 300.0)
    resign(path, lambda r: r.pop("plan"))
    assert st.lookup(tkey(gemver, "Fake GPU"))["time_us"] == 300.0
    assert any("invalid plan" in w for w in warnings)
    # through compile(), as on a GPU machine: no KeyError, the plan is the search's or the stored one
    monkeypatch.setattr(rgpu, "gpu_name", lambda: "Fake GPU")
    path.write_text(json.dumps(HEADER) + "\n")
    st.append(tkey(gemver, "Fake GPU"), gemver.plan, 300.0)
    resign(path, lambda r: r.pop("plan"))
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=path)
    assert prog.plan.kernels == gemver.plan.kernels


def test_calibration_entry_with_infinity_is_refused(tmp_path, lib):
    path = tmp_path / "cal.json"
    write_entry(path, synthetic(lib, lambda keys, p, env: 1.0, gpu="GPU A"))
    for bad in (float("inf"), float("nan"), -1.0, "1.0", True):
        data = json.loads(path.read_text())
        e = data["entries"][0]
        pid = next(iter(e["probes"]))
        e["probes"][pid]["points"][0]["ns"] = bad
        e["sha256"] = cal_store._digest(e)
        bad_path = tmp_path / "bad.json"
        bad_path.write_text(json.dumps(data))
        warnings = []
        assert read_file(bad_path, warnings.append) == [], bad
        assert "malformed" in warnings[0]
    data = json.loads(path.read_text())
    e = data["entries"][0]
    e["device"]["sms"] = float("inf")
    e["sha256"] = cal_store._digest(e)
    with pytest.raises(Exception) as info:
        Calibration.from_json(e)
    assert info.type.__name__ == "CalibrationError"


# ---- 6. deeply nested JSON, and $KFUSE_CALIBRATION without a GPU ------------------------------

DEEP = "[" * 5000 + "]" * 5000


def test_deeply_nested_json_in_the_tuning_store(tmp_path, gemver):
    path = tmp_path / "t.jsonl"
    warnings = []
    st = TuningStore(path, warn=warnings.append)
    st.append(tkey(gemver), gemver.plan, 300.0)
    with open(path, "a") as f:
        f.write(DEEP + "\n" + '{"key": ' + "{\"a\": " * 5000 + "1" + "}" * 5000 + "}\n")
    assert len(st.records()) == 1
    assert st.lookup(tkey(gemver))["time_us"] == 300.0
    assert len([w for w in warnings if "skipped" in w]) >= 2
    path.write_text(DEEP + "\n")                               # as the header
    assert st.records() == [] and "not a kfuse tuning store" in warnings[-1]


def test_deeply_nested_calibration_file(tmp_path, lib):
    path = tmp_path / "cal.json"
    path.write_text('{"format": "kfuse-calibration", "version": 1, "entries": [' + DEEP + "]}")
    warnings = []
    assert read_file(path, warnings.append) == [] and "nested too deeply" in warnings[0]
    with pytest.raises(Exception, match="refusing to overwrite"):
        write_entry(path, synthetic(lib, lambda keys, p, env: 1.0))


def test_calibration_env_var_is_honoured_without_a_gpu(tmp_path, lib, monkeypatch):
    from kfuse.runtime import gpu as rgpu
    monkeypatch.setattr(rgpu, "gpu_name", lambda: None)
    monkeypatch.setattr(calibrated, "_noticed", set())
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "mine.json"
    write_entry(path, synthetic(lib, lambda keys, p, env: 1.0, gpu="My Own GPU"))
    monkeypatch.setenv("KFUSE_CALIBRATION", str(path))
    assert cal_store.SHIPPED.is_dir() and list(cal_store.SHIPPED.glob("*.json"))   # a shipped one exists
    msgs = []
    model = calibrated.choose_model(lib, "float32", warn=msgs.append)
    assert isinstance(model, calibrated.CalibratedModel) and model.cal.gpu == "My Own GPU", msgs


# ---- 5. concurrency and the cost of a large store ----------------------------------------------

def _race(path, n, barrier, fn):
    barrier.wait()
    for i in range(n):
        fn(path, i)
    os._exit(0)


def _forked(n_procs, target, *args):
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(n_procs)
    procs = [ctx.Process(target=_race, args=(*args[:2], barrier, target(k))) for k in range(n_procs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


def test_concurrent_creation_writes_one_header(tmp_path, gemver):
    for trial in range(12):
        path = tmp_path / f"t{trial}.jsonl"
        _forked(6, lambda k: (lambda p, i: TuningStore(p).append(tkey(gemver, f"gpu{k}"), gemver.plan, 1.0)), path, 1)
        warnings = []
        assert len(TuningStore(path, warn=warnings.append).records()) == 6 and not warnings
        assert path.read_text().count('"format": "kfuse-tuning-store"') == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tuning-")]


def test_concurrent_calibration_writers_lose_nothing(tmp_path, lib):
    cals = {k: [synthetic(lib, lambda keys, p, env: 1.0, gpu=f"GPU {k}-{i}") for i in range(3)] for k in range(3)}
    path = tmp_path / "cal.json"
    _forked(3, lambda k: (lambda p, i: write_entry(p, cals[k][i])), path, 3)
    assert sorted(c.gpu for c in read_file(path)) == sorted(f"GPU {k}-{i}" for k in range(3) for i in range(3))


def test_lookup_does_not_parse_unrelated_records(tmp_path, gemver, monkeypatch):
    path = tmp_path / "t.jsonl"
    st = TuningStore(path)
    for n in range(200):
        st.append(tkey(gemver, f"other GPU {n}"), gemver.plan, float(n))
    st.append(tkey(gemver), gemver.plan, 42.0)
    parsed = []
    real = json.loads
    monkeypatch.setattr(tstore.json, "loads", lambda s, *a, **k: (parsed.append(1), real(s, *a, **k))[1])
    assert st.lookup(tkey(gemver))["time_us"] == 42.0
    assert len(parsed) <= 2                                  # the header and the one matching record


def test_a_stored_plan_is_built_once(tmp_path, gemver, monkeypatch):
    """Issue 59 item 5: the stored winner is checked by the planner's rules and built once (the
    store once built it to validate it and threw the kernels away; the pipeline built it again)."""
    import kfuse
    import kfuse.runtime.gpu as rgpu
    from kfuse import codegen
    from kfuse.compiler import pipeline
    monkeypatch.setattr(rgpu, "gpu_name", lambda: "Fake GPU")
    path = tmp_path / "tuning.jsonl"
    unfused = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False, fuse=False)
    TuningStore(path).append(tkey(gemver, "Fake GPU"), unfused.plan, 1.0)
    built = []
    real = codegen.generate
    for module in (codegen, pipeline):          # wherever a build is asked for
        monkeypatch.setattr(module, "generate", lambda plan, lib: built.append(plan) or real(plan, lib))
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=path)
    assert prog.from_store and prog.plan.kernels == unfused.plan.kernels != gemver.plan.kernels
    assert built == [prog.plan]
