"""The command line on ordinary mistakes: a message and an exit status, never a traceback
(1: a kfuse error, 2: a usage error); logging, -v / -q, --version, --json, cache, --graph."""
import json
import logging
import subprocess
import sys
import types

import pytest

import kfuse
from conftest import ROOT
from kfuse.cli.main import main

SSCAL = str(ROOT / "examples" / "sscal.kf")
GEMVER = str(ROOT / "examples" / "gemver.kf")


@pytest.fixture
def no_driver(monkeypatch):
    """CuPy installed, but no usable driver: every runtime call raises (cudaErrorInsufficientDriver)."""
    class DriverError(RuntimeError):
        pass

    def fail(*a, **k):
        raise DriverError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
    runtime = types.SimpleNamespace(getDeviceCount=fail, getDeviceProperties=fail)
    cuda = types.SimpleNamespace(runtime=runtime, Device=fail)
    fake = types.ModuleType("cupy")
    fake.cuda = cuda
    fake.asarray = fake.full = fake.zeros = fake.empty = fail
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ---- no GPU ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["run", SSCAL, "--size", "64"], ["tune", SSCAL, "--top", "2"],
                                  ["bench", "--seq", "sscal"], ["bench", "--per-call", "--seq", "sscal"]])
def test_gpu_commands_without_a_driver_say_a_gpu_is_needed(no_driver, argv, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "runs kernels on a GPU and none is usable here" in err and "Traceback" not in err


def test_report_without_gpu_creates_nothing(no_driver, tmp_path, capsys):
    out = tmp_path / "new" / "report.md"
    assert main(["report", "--seq", "sscal", "--out", str(out)]) == 1
    assert "report runs kernels on a GPU" in capsys.readouterr().err
    assert not out.parent.exists()


# ---- script files ----------------------------------------------------------------------------------
def test_script_not_utf8(tmp_path, capsys):
    bad = tmp_path / "bad.kf"
    bad.write_bytes(b"vector x, y;\ninput x;\ny = scal(2, x); # caf\xe9\nreturn y;\n")
    assert main(["plan", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:22: error: the script is not UTF-8 text (byte 0xe9" in err


def test_script_with_utf8_bom_is_accepted(tmp_path, capsys):
    f = tmp_path / "bom.kf"
    f.write_bytes(b"\xef\xbb\xbf" + (ROOT / "examples" / "sscal.kf").read_bytes())
    assert main(["plan", str(f)]) == 0
    assert kfuse.compile("\ufeffvector x, y; input x; y = scal(2, x); return y;").kernels


@pytest.mark.parametrize("path, message", [("missing.kf", "no such script file"),
                                           (".", "is a folder, not a script file"),
                                           ("/dev/null", "not a regular file")])
def test_missing_folder_and_device_say_which(tmp_path, path, message, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", path]) == 1
    err = capsys.readouterr().err
    assert f"{path}: error: {message}" in err and ":0:0" not in err


def test_path_with_semicolon_is_a_path(tmp_path, capsys):
    f = tmp_path / "a;b.kf"
    f.write_text((ROOT / "examples" / "sscal.kf").read_text())
    assert kfuse.compile(str(f)).program.name == "a_b"
    assert main(["plan", str(f)]) == 0
    assert main(["plan", str(tmp_path / "c;d.kf")]) == 1
    assert "no such script file" in capsys.readouterr().err


def test_eof_caret_after_the_last_token(capsys, tmp_path):
    f = tmp_path / "eof.kf"
    f.write_text("vector x[n")
    assert main(["plan", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:1:11: error: expected ']', found 'end of script'" in err
    assert err.splitlines()[-1] == " " * 14 + "^"


def test_form_feed_does_not_shift_lines(lib):
    src = "vector x, y;\f\ninput x;\ny = scall(2, x);\nreturn y;\n"
    with pytest.raises(kfuse.ScriptError) as e:
        kfuse.compile(src)
    assert e.value.line == 3 and "y = scall(2, x);" in str(e.value).splitlines()[1]


def test_non_finite_literal_refused():
    with pytest.raises(kfuse.ScriptError, match=r"1e999 is too large"):
        kfuse.compile("vector x, y; input x; y = scal(1e999, x); return y;")


# ---- options ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["plan", SSCAL, "--all", "-3"], ["tune", SSCAL, "--top", "-1"],
                                  ["run", SSCAL, "--reps", "0"], ["bench", "--n", "10^1000000000"],
                                  ["bench", "--N", "2^49"], ["report", "--n", "0"]])
def test_bad_numbers_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_run_refuses_sizes_that_cannot_be_allocated(capsys):
    assert main(["run", SSCAL, "--size", "1000000000000"]) == 1
    err = capsys.readouterr().err
    assert "host memory" in err and "give smaller --size" in err


def test_compile_output_into_missing_folder_or_onto_folder(tmp_path, capsys):
    assert main(["compile", SSCAL, "-o", str(tmp_path / "nope" / "a.cu")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["compile", SSCAL, "-o", str(tmp_path)]) == 1
    assert "is a folder" in capsys.readouterr().err


def test_compile_plans_for_the_sizes_given(tmp_path, capsys):
    """`kfuse compile --size` writes the code of the plan for those sizes (the plan's kernels, as
    `kfuse plan --size` prints them), and names the script's sizes when given another."""
    sgemv = str(ROOT / "examples" / "sgemv.kf")
    for size in ("1024", "n=16384"):
        assert main(["-q", "compile", sgemv, "--dtype", "float64", "--size", size, "-o", str(tmp_path / "a.cu")]) == 0
        capsys.readouterr()
        assert main(["-q", "plan", sgemv, "--dtype", "float64", "--size", size, "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        names = [k["name"] for k in plan["plan"]["kernels"]]
        assert names and all(f"// kernel {name}:" in (tmp_path / "a.cu").read_text() for name in names)
    variants = set()
    for size in ("1024", "16384"):
        assert main(["-q", "compile", sgemv, "--dtype", "float64", "--size", size]) == 0
        variants.add(next(line.split("[", 1)[1] for line in capsys.readouterr().out.splitlines()
                          if line.startswith("//") and "= gemv(" in line))
    assert len(variants) == 2, variants     # a strip at 1024, a wide tile at 16384: the sizes reach the plan
    assert main(["compile", sgemv, "--size", "m=5"]) == 1
    assert "the script's sizes are n" in capsys.readouterr().err


def test_usage_and_kfuse_errors_have_different_exit_codes(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan"])
    assert e.value.code == 2
    assert main(["plan", "missing.kf"]) == 1


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"kfuse {kfuse.__version__}"


def test_every_option_has_help():
    from kfuse.cli.main import parser

    def walk(p):
        for a in p._actions:
            if a.help is None:
                yield p.prog, a.option_strings or a.dest
            if isinstance(a, type(p._subparsers._group_actions[0])) if p._subparsers else False:
                for sp in a.choices.values():
                    yield from walk(sp)
    missing = list(walk(parser()))
    assert not missing, missing


# ---- logging ---------------------------------------------------------------------------------------
def test_compile_notice_goes_through_logging(caplog, capsys, monkeypatch):
    from kfuse.cost import calibrated
    monkeypatch.setattr(calibrated, "_noticed", set())
    with caplog.at_level(logging.WARNING, logger="kfuse"):
        kfuse.compile(SSCAL)
    assert any("plans are ranked with" in r.getMessage() for r in caplog.records)
    assert "plans are ranked with" not in capsys.readouterr().err


def test_compile_notice_can_be_silenced(monkeypatch):
    code = ("import logging, kfuse; logging.getLogger('kfuse').setLevel(logging.ERROR); "
            f"kfuse.compile({SSCAL!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""


def test_quiet_and_verbose(monkeypatch, capsys):
    from kfuse.cost import calibrated
    monkeypatch.setattr(calibrated, "_noticed", set())
    assert main(["-q", "plan", SSCAL]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(calibrated, "_noticed", set())
    assert main(["plan", SSCAL]) == 0
    assert "kfuse: no GPU here: plans are ranked with" in capsys.readouterr().err


def test_plan_all_verbose_shows_every_macro(capsys):
    assert main(["-v", "plan", GEMVER, "--all", "40"]) == 0
    lines = [ln.split(" us  ", 1)[1] for ln in capsys.readouterr().out.splitlines() if " us  " in ln]
    assert len(lines) == 40 and len(set(lines)) == 40          # no two plans print alike
    assert "TC=" in "".join(lines) or "BY=" in "".join(lines)


def test_plan_all_shows_every_macro(capsys):
    """Without -v too: plans that differ only in a macro other than BY (TC) print differently."""
    assert main(["-q", "plan", GEMVER, "--all", "200"]) == 0
    lines = [ln.split(" us  ", 1)[1] for ln in capsys.readouterr().out.splitlines() if " us  " in ln]
    assert len(lines) == 200 and len(set(lines)) == 200
    assert any("/TC" in ln for ln in lines)


# ---- JSON, graph, cache ----------------------------------------------------------------------------
def test_plan_json(capsys):
    assert main(["plan", GEMVER, "--json", "--all", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "gemver" and len(doc["plan"]["kernels"]) == 2 and len(doc["plans"]) == 3
    assert doc["plans"][0] == doc["plan"] and "macros" in doc["plan"]["kernels"][0]["calls"][0]


def test_plan_loop_prices_a_device_loop_step(capsys):
    """--loop: the plan as one step of a device loop (cost/queued.py), in text and JSON."""
    from kfuse.cost.queued import H100
    assert main(["plan", GEMVER, "--loop", "--size", "1024", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["loop_step"]
    assert step["graph_nodes"] >= 1 and len(step["grids"]) >= step["graph_nodes"]
    want = step["bodies_us"] + step["graph_nodes"] * H100.node * 1e6 + step["merged_phases"] * H100.phase * 1e6
    assert abs(step["us"] - want) < 0.01
    assert main(["plan", GEMVER, "--loop"]) == 0
    assert "as one step of a device loop: predicted" in capsys.readouterr().out


def test_plan_graph_is_dot_only_with_kernel_clusters(capsys):
    assert main(["plan", GEMVER, "--graph"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "gemver" {') and out.rstrip().endswith("}")
    assert out.count("subgraph cluster_") == 2
    if __import__("shutil").which("dot"):
        assert subprocess.run(["dot", "-Tsvg"], input=out, capture_output=True, text=True).returncode == 0


def test_cache_list_show_clear(cache_dir, capsys):
    from kfuse.ir.plan import Plan  # noqa: F401 - the store's records
    from kfuse.tuning.store import TuningStore, store_key
    prog = kfuse.compile(SSCAL)
    TuningStore(cache_dir / "tuning.jsonl").append(store_key(prog.program, "GPU X", "float32", prog.search.dims),
                                                   prog.plan, 12.5, {"rank": 1})
    assert main(["cache", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    tuning = next(r for r in rows if r["kind"] == "tuning")
    assert tuning["entries"] == 1 and tuning["exists"]
    assert any(r["kind"] == "calibration" and r["shipped"] for r in rows)
    assert main(["cache", "show"]) == 0
    assert "GPU X" in capsys.readouterr().out
    assert main(["cache", "clear", "--tuning"]) == 1        # stdin is not a terminal: --yes needed
    assert (cache_dir / "tuning.jsonl").exists()
    assert main(["cache", "clear", "--tuning", "--yes"]) == 0
    assert not (cache_dir / "tuning.jsonl").exists()


def test_broken_pipe_is_quiet():
    proc = subprocess.run(f"{sys.executable} -m kfuse plan {GEMVER} --all 200 | head -1", shell=True,
                          capture_output=True, text=True, env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.stdout.startswith("plan for gemver") and "Traceback" not in proc.stderr
    assert "BrokenPipeError" not in proc.stderr


# ---- tune keeps its winner when the store cannot take it ------------------------------------------
@pytest.mark.parametrize("kind", ["foreign", "unwritable"])
def test_tune_keeps_the_winner_when_the_store_fails(tmp_path, monkeypatch, caplog, kind):
    from kfuse.tuning import search
    prog = kfuse.compile(SSCAL, tuned=False)

    def fake_measure(compiled, plans, dims, reps=30, log=None, label="tune"):
        return [(10.0 + n, n, compiled.with_plan(p)) for n, p in enumerate(plans)], 0.0
    monkeypatch.setattr(search, "measure_plans", fake_measure)
    monkeypatch.setattr(search, "gpu_name", lambda: "GPU X")
    if kind == "foreign":
        store = tmp_path / "foreign.jsonl"
        store.write_text('{"not": "kfuse"}\n')
    else:
        (tmp_path / "file").write_text("")
        store = tmp_path / "file" / "tuning.jsonl"        # its folder is a file: cannot be created
    with caplog.at_level(logging.INFO, logger="kfuse"):
        best = search.tune(prog, top=3, store=store, iterations=False)
    assert [k.calls for k in best.plan.kernels] == [k.calls for k in prog.search.best().kernels]
    assert best.tuning["stored"] is None and best.tuning["not_stored"]
    assert best.tuning["time_us"] == 10.0
    assert any("was not remembered" in r.getMessage() for r in caplog.records)


# ---- --json on run and tune, on NumPy stand-ins for the GPU -------------------------------------
@pytest.fixture
def numpy_gpu(monkeypatch):
    """CuPy replaced by NumPy, kfuse's calls evaluated by NumPy, timings fixed."""
    import numpy as np

    from kfuse.runtime import timing
    from test_bench import fake_cupy, numpy_kfuse_bind, numpy_kfuse_call, numpy_outputs
    from kfuse.compiler.callpath import CallPath
    cp = fake_cupy()
    cp.asnumpy = np.asarray
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(kfuse.CompiledScript, "__call__", numpy_kfuse_call)
    monkeypatch.setattr(CallPath, "outputs", numpy_outputs)
    monkeypatch.setattr(kfuse.CompiledScript, "bind", numpy_kfuse_bind)
    monkeypatch.setattr(timing, "median_us", lambda fn, **k: (fn(), 12.5)[1])
    return cp


def test_run_json(numpy_gpu, capsys):
    assert main(["-q", "run", GEMVER, "--size", "64", "--json", "--reps", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "gemver" and doc["ok"] is True and doc["time_us"] == 12.5 and doc["reps"] == 3
    assert set(doc["sizes"].values()) == {64} and set(doc["errors"]) == {"B", "x", "w"}
    assert doc["kernels"] == len(doc["plan"]["kernels"]) >= 1


def test_tune_json(numpy_gpu, monkeypatch, tmp_path, capsys):
    from kfuse.tuning import search

    def fake_measure(compiled, plans, dims, reps=30, log=None, label="tune"):
        return [(10.0 + n, n, compiled.with_plan(p)) for n, p in enumerate(plans)], 0.0
    monkeypatch.setattr(search, "measure_plans", fake_measure)
    monkeypatch.setattr(search, "gpu_name", lambda: "GPU X")
    store = tmp_path / "store.jsonl"
    assert main(["-q", "tune", SSCAL, "--top", "2", "--json", "--store", str(store)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "sscal" and doc["time_us"] == 10.0 and doc["plan"]["kernels"]
    assert doc["stored"] and store.is_file()
