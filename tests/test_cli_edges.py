"""CLI rough edges of issue 44: -v/-q anywhere, shipped examples by name, no planning or notice
before refusing for lack of a GPU, a calibration notice that reads cleanly, plan --all lines that
differ where the plans differ, --json on every command with every failure as one JSON error (CPU)."""
from __future__ import annotations

import json
import logging
import re

import pytest

from kfuse.cli.main import main, parser

import kfuse
from test_cli import SSCAL, no_driver, numpy_gpu  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("argv", [["plan", SSCAL, "-v"], ["-v", "plan", SSCAL], ["plan", "-v", SSCAL],
                                  ["cache", "list", "-v"]])
def test_verbose_anywhere(argv):
    assert parser().parse_args(argv).verbose == 1


def test_quiet_after_the_command_silences_notices(capsys):
    assert main(["plan", SSCAL, "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_flags_before_the_command_stay(capsys):
    args = parser().parse_args(["-q", "plan", SSCAL])
    assert args.quiet and args.verbose == 0


@pytest.mark.parametrize("cmd", ["plan", "compile"])
def test_shipped_example_by_name(cmd, capsys):
    assert main([cmd, "gemver"]) == 0
    assert "gemver" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["run", "sscal", "--size", "64"], ["tune", "sscal", "--top", "2"]])
def test_no_notice_before_refusing_for_lack_of_a_gpu(no_driver, argv, capsys, caplog):  # noqa: F811
    with caplog.at_level(logging.INFO, logger="kfuse"):
        assert main(argv) == 1
    err = capsys.readouterr().err
    assert "GPU" in err and "calibration" not in err


def test_calibration_notice_reads_cleanly(capsys, monkeypatch):
    """One line: why (no GPU here), what ranks the plans, then the library and dtype, with no
    "this machine (no GPU)/<digest>" path-like run-on."""
    from kfuse.cost import calibrated
    monkeypatch.setattr(calibrated, "_noticed", set())
    monkeypatch.delenv("KFUSE_CALIBRATION", raising=False)
    assert main(["plan", SSCAL]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and re.fullmatch(
        r"kfuse: no GPU here: plans are ranked with the shipped NVIDIA H100 80GB HBM3 calibration "
        r"\(library [0-9a-f]{16}, float32\)", err[0]), err


@pytest.mark.parametrize("script", ["sscal", "axpydot", "waxpby", "gemver"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_plan_all_lines_differ_where_the_plans_differ(script, dtype, capsys):
    """``plan --all`` without -v: two listed plans print alike only if they are the same plan (vector
    kernels that differ only in instances per block, B8 / B32, printed alike before)."""
    assert main(["-q", "plan", script, "--dtype", dtype, "--all", "60", "--json"]) == 0
    plans = [json.dumps(p["kernels"], sort_keys=True) for p in json.loads(capsys.readouterr().out)["plans"]]
    plans = [re.sub(r'"predicted_us": [0-9.e+-]+', "", p) for p in plans]
    assert main(["-q", "plan", script, "--dtype", dtype, "--all", "60"]) == 0
    lines = [ln.split(" us  ", 1)[1] for ln in capsys.readouterr().out.splitlines() if " us  " in ln]
    assert len(lines) == len(plans)
    assert len(set(zip(lines, plans))) == len(set(lines)) == len(set(plans))


# ---- --json on every command, failures included ----------------------------------------------------
def _commands(p=None, name="kfuse"):
    """(name, parser) of every command that does something (cache's actions, not cache itself)."""
    import argparse
    subs = [a for a in (p or parser())._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and p is not None:
        yield name, p
    for a in subs:
        for sub, sp in a.choices.items():
            yield from _commands(sp, f"{name} {sub}")


def test_every_command_takes_json():
    names = []
    for name, p in _commands():
        assert any("--json" in a.option_strings for a in p._actions), name
        names.append(name)
    assert {"kfuse compile", "kfuse bench", "kfuse calibrate", "kfuse report", "kfuse cache clear"} <= set(names)


@pytest.mark.parametrize("argv", [["--json", "plan", SSCAL], ["plan", SSCAL, "--json"], ["--json", "cache", "list"],
                                  ["cache", "--json", "clear"], ["cache", "show", "--json"], ["-q", "--json", "bench"]])
def test_json_before_or_after_the_command(argv):
    assert parser().parse_args(argv).json is True
    assert parser().parse_args([a for a in argv if a != "--json"]).json is False


def _one_json_error(capsys, argv, code):
    """The command fails with ``code`` with and without --json; with it, stdout is one JSON object
    whose error says the same as stderr; returns that error."""
    plain = main([a for a in argv if a != "--json"])
    out, err = capsys.readouterr()
    assert plain == code and out == "" and err.startswith("kfuse: ")
    assert main(argv) == code
    out, err_json = capsys.readouterr()
    doc = json.loads(out)
    assert list(doc) == ["error"] and doc["error"]["exit_code"] == code
    assert f"kfuse: {doc['error']['message']}" == err.rstrip("\n") == err_json.rstrip("\n")
    return doc["error"]


def test_json_script_error_names_file_line_column(tmp_path, capsys):
    bad = tmp_path / "bad.kf"
    bad.write_text("vector x, y;\ninput x;\ny = nosuch(x);\nreturn y;\n")
    for cmd in ("compile", "plan", "run", "tune"):
        e = _one_json_error(capsys, [cmd, str(bad), "--json"], 1)
        assert e["kind"] == "script" and e["file"] == str(bad) and (e["line"], e["column"]) == (3, 5)
        assert "nosuch" in e["reason"] and "\n" not in e["reason"]


def test_json_missing_script_and_bad_library(tmp_path, capsys):
    e = _one_json_error(capsys, ["--json", "plan", str(tmp_path / "none.kf")], 1)
    assert e["kind"] == "script" and e["line"] is None and "no such script file" in e["message"]
    e = _one_json_error(capsys, ["compile", SSCAL, "--json", "--library", str(tmp_path / "nolib")], 1)
    assert e["kind"] == "library" and e["file"] == str(tmp_path / "nolib") and e["field"]
    e = _one_json_error(capsys, ["compile", SSCAL, "--json", "--size", "m=5"], 1)
    assert e["kind"] == "error" and "the script's sizes are" in e["message"]


@pytest.mark.parametrize("argv", [["run", SSCAL, "--size", "64"], ["tune", SSCAL], ["bench", "--seq", "sscal"],
                                  ["bench", "--per-call", "--seq", "sscal"], ["calibrate"],
                                  ["report", "--seq", "sscal"]])
def test_json_no_gpu(no_driver, argv, capsys, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    e = _one_json_error(capsys, [*argv, "--json"], 1)
    assert e["kind"] == "no_gpu" and "GPU" in e["message"]


def test_run_json_says_its_failures(numpy_gpu, monkeypatch, capsys):  # noqa: F811
    """run --json printed nothing on a failure: a bad size, a failed launch, a wrong result."""
    e = _one_json_error(capsys, ["run", "gemver", "--size", "n=0", "--json"], 1)
    assert "sizes are at least 1" in e["message"]
    from kfuse.compiler.callpath import CallPath
    from kfuse.errors import LaunchError

    def fail(*a, **k):
        raise LaunchError("the launch failed")
    with monkeypatch.context() as m:
        m.setattr(kfuse.CompiledScript, "__call__", fail)
        m.setattr(CallPath, "outputs", fail)
        e = _one_json_error(capsys, ["-q", "run", "gemver", "--size", "64", "--json"], 1)
    assert e["kind"] == "launch" and e["message"] == "the launch failed"
    from kfuse import reference
    monkeypatch.setattr(reference, "relative_error", lambda *a: 0.5)
    assert main(["-q", "run", "gemver", "--size", "64", "--json", "--reps", "2"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["errors"]["w"] == 0.5
    assert doc["error"]["kind"] == "wrong_result" and doc["error"]["exit_code"] == 1 and "w" in doc["error"]["message"]


@pytest.mark.parametrize("argv", [["plan", SSCAL, "--json", "--bogus"], ["--json", "plan"], ["--json"],
                                  ["run", SSCAL, "--json", "--reps", "0"], ["--json", "cache", "purge"]])
def test_json_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert e.value.code == 2 and doc["error"]["kind"] == "usage" and doc["error"]["exit_code"] == 2
    assert doc["error"]["message"] in err and err.startswith("usage: ")
    with pytest.raises(SystemExit) as e:                # without --json: argparse's text only
        main([a for a in argv if a != "--json"])
    assert e.value.code == 2 and capsys.readouterr().out == ""


def test_compile_json(tmp_path, capsys):
    assert main(["-q", "compile", SSCAL, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "sscal" and "__global__" in doc["cuda_source"] and doc["output"] is None
    assert doc["lines"] == len(doc["cuda_source"].splitlines()) and doc["kernels"] == len(doc["plan"]["kernels"])
    out = tmp_path / "a.cu"
    assert main(["-q", "compile", SSCAL, "--json", "-o", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["output"] == str(out) and "cuda_source" not in doc and out.read_text().count("\n") == doc["lines"]
    e = _one_json_error(capsys, ["compile", SSCAL, "--json", "-o", str(tmp_path)], 1)
    assert "is a folder" in e["message"]


def test_plan_graph_json(capsys):
    assert main(["-q", "plan", "gemver", "--graph", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["graph"].startswith('digraph "gemver" {') and doc["plan"]["kernels"]


def test_cache_clear_json(tmp_path, capsys, monkeypatch):
    from kfuse.tuning.store import TuningStore, store_key
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    store = tmp_path / "tuning.jsonl"
    prog = kfuse.compile(SSCAL)
    TuningStore(store).append(store_key(prog.program, "GPU X", "float32", prog.search.dims), prog.plan, 12.5, {})
    e = _one_json_error(capsys, ["cache", "clear", "--json"], 1)     # no question on a JSON stdout
    assert "confirm with --yes" in e["message"] and store.exists()
    assert main(["-q", "cache", "clear", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"removed": [str(store)], "refused": []}
    assert not store.exists()
    store.write_text("not a store\n")          # refused: exit 1, and the error says why
    assert main(["-q", "cache", "clear", "--yes", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["removed"] == [] and doc["error"]["kind"] == "refused" and "not a kfuse tuning file" in doc["error"]["message"]


# ---- --size: the names kfuse.compile reads, and no value silently dropped -----------------------
def test_size_takes_the_automatic_names_of_every_value(capsys):
    """``--size x.len=N`` (docs/cli.md: "or an automatic one such as A.rows") was refused with
    "the script's sizes are A.cols, A.rows" where ``kfuse.compile(sizes={"x.len": N})`` took it."""
    from kfuse.cli.util import parse_sizes
    p = kfuse.compile("matrix A;\nvector x, y;\ninput A, x;\ny = gemv(A, x);\nreturn y;\n", fuse=False).program
    dims = parse_sizes(p, ["x.len=7", "y.len=5"])
    assert {p.dims[d].name: s for d, s in dims.items()} == {"A.cols": 7, "A.rows": 5}
    assert main(["-q", "plan", SSCAL, "--size", "ax.len=64"]) == 0


@pytest.mark.parametrize("sizes, message", [
    (["N=5", "N=7"], "--size N=5 and --size N=7 give one size of the script \\(N\\) two values"),
    (["x.len=5", "N=7"], "--size x.len=5 and --size N=7 give one size"),
    (["5", "6"], "--size 5 and --size 6: two sizes for every size not named"),
    (["=5"], "the name is empty"),
    (["N=5=6"], "--size N=5=6: expected NAME=INT or INT"),
])
def test_size_given_twice_or_malformed_is_an_error(sizes, message, capsys):
    """The last of two values silently won; ``--size =5`` was taken as a bare size and ``N=5=6``
    was refused as an unknown name ``N=5``."""
    argv = ["plan", SSCAL]
    for s in sizes:
        argv += ["--size", s]
    assert main(argv) == 1
    assert re.search(message, capsys.readouterr().err)
    assert main(["-q", "plan", SSCAL, "--size", "N=5", "--size", "N=5"]) == 0      # the same value twice is fine


def test_size_of_a_size_the_script_fixes(tmp_path, capsys):
    """``vector x[5]`` planned for ``--size 5=100`` (or ``x.len=100``) in silence."""
    script = tmp_path / "lit.kf"
    script.write_text("vector x[5], y[5];\ninput x;\ny = scal(2, x);\nreturn y;\n")
    for size in ("5=100", "x.len=100"):
        assert main(["plan", str(script), "--size", size]) == 1
        assert f"--size {size}: the script fixes that size at 5" in capsys.readouterr().err
    assert main(["-q", "plan", str(script), "--size", "x.len=5", "--size", "100"]) == 0     # bare: the others


@pytest.mark.parametrize("argv, named", [
    (["--unfused", "--explain"], "--explain: --unfused plans one kernel per call"),
    (["--unfused", "--all", "3", "--loop"], "--all, --loop: --unfused plans one kernel per call"),
    (["--graph", "--all", "3"], "--all: --graph prints the DOT graph alone"),
    (["--graph", "--explain", "--timings"], "--explain, --timings: --graph prints the DOT graph alone"),
])
def test_plan_options_that_would_be_dropped_are_usage_errors(argv, named, capsys):
    """plan --unfused --explain (or --all, --loop) printed the plain plan, and --graph with
    --explain, --all, --loop or --timings the graph alone: the options were dropped in silence."""
    with pytest.raises(SystemExit) as e:
        main(["plan", "gemver", *argv])
    assert e.value.code == 2 and named in capsys.readouterr().err
    assert main(["-q", "plan", "gemver", "--unfused", "--timings"]) == 0
    assert main(["-q", "plan", "gemver", "--unfused", "--graph"]) == 0


def test_plan_json_says_the_explanation(capsys):
    """plan --json --explain left the explanation out of the document."""
    assert main(["-q", "plan", "gemver", "--json", "--explain", "--graph"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "legal fusion(s)" in doc["explain"] and "refused" in doc["explain"] and doc["graph"]
    assert main(["-q", "plan", "gemver", "--json"]) == 0
    assert "explain" not in json.loads(capsys.readouterr().out)


def test_compile_never_writes_over_its_script(tmp_path, capsys):
    """``kfuse compile x.kf -o x.kf`` (or through a link, or ./x.kf) replaced the script with its
    CUDA, and ``-o ''`` wrote to stdout in silence."""
    script = tmp_path / "x.kf"
    text = "vector x, y;\ninput x;\ny = scal(2, x);\nreturn y;\n"
    script.write_text(text)
    (tmp_path / "link.kf").symlink_to(script)
    for out in (script, tmp_path / "." / "x.kf", tmp_path / "link.kf"):
        e = _one_json_error(capsys, ["compile", str(script), "-o", str(out), "--json"], 1)
        assert e["message"] == f"-o {out}: is the script itself; give another file name"
    e = _one_json_error(capsys, ["compile", str(script), "-o", "", "--json"], 1)
    assert e["message"] == "-o: the file name is empty"
    assert script.read_text() == text
    assert main(["-q", "compile", str(tmp_path / "link.kf"), "-o", str(tmp_path / "x.cu")]) == 0
