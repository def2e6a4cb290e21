"""The README holds (CPU): every command in it is run here or by .ci/run, every output it shows is
what kfuse prints, every page it links exists; it stays short.  Set-up: Python and nvcc stated,
command 1 is what CI runs and writes only under an ignored folder, command 2 is the quick run and
the whole suite is what CI runs; the sample notice is the one kfuse prints; the command synopsis
fits the headline script; the API example says it needs CuPy (and runs on a GPU)."""
import contextlib
import io
import logging
import os
import re
import shlex
import subprocess
import sys
import tomllib

import pytest

import kfuse
from conftest import ROOT

README = (ROOT / "README.md").read_text()
SETUP = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
CI = (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")


def _blocks(lang: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def _commands() -> list[str]:
    """Every command of the README's bash blocks, its comment cut off."""
    return [line.split("   #", 1)[0].strip() for block in _blocks("bash") for line in block.splitlines()
            if line.strip() and not line.startswith("#")]


def _setup_commands() -> list[str]:
    return _commands()[:2]


def _output_after(marker: str) -> str:
    """The ```text block that follows ``marker`` in the README."""
    return _blocks("text", README.split(marker, 1)[1])[0]


def _planned(text: str) -> str:
    return re.sub(r"planned in [0-9.]+ s", "planned in T s", text).strip()


def test_readme_is_short():
    assert len(README.splitlines()) <= 250


def test_setup_states_python_and_nvcc():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11" and "Python >= 3.11" in SETUP
    assert "nvcc" in SETUP and "CPU tests" in SETUP


def test_command_1_is_what_ci_runs_and_writes_under_an_ignored_folder():
    cmd = _setup_commands()[0]
    assert cmd in CI
    out = shlex.split(cmd)[shlex.split(cmd).index("-o") + 1]
    top = out.split("/")[0]
    assert "/" in out and f"{top}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_command_2_is_the_quick_run_and_ci_runs_the_whole_suite():
    """Command 2 is pytest's default run, which leaves out ``gpu`` and ``slow`` (a worker per core:
    conftest.py); the README states the whole suite's command, and it is the one .ci/run runs."""
    assert _setup_commands()[1] == "python3 -m pytest -q"
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert addopts == "-m 'not gpu and not slow' --numprocesses=auto"
    whole = "python3 -m pytest -q -m 'not gpu'"
    assert f"`{whole}`" in SETUP and re.search(rf"^{re.escape(whole)}$", CI, re.M)


def test_every_command_is_run_here_or_by_ci():
    """The README's bash commands: the set-up ones by .ci/run, the others below."""
    here = {"kfuse plan examples/bicgk.kf"}
    rest = [c for c in _commands() if c not in CI]
    assert set(rest) <= here, rest


def test_command_1_installs_no_cupy_and_the_readme_says_so():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = re.search(r"\.\[(\w+)\]", _setup_commands()[0]).group(1)
    assert not any("cupy" in d for d in project["dependencies"] + project["optional-dependencies"][extra])
    assert "CuPy" in SETUP and "'.[gpu]'" in SETUP
    api = README.split("## Python API", 1)[1].split("```python", 1)
    assert "import cupy" in api[1].split("```", 1)[0]
    assert "CuPy" in api[0] and "'.[gpu]'" in api[0]                 # said before the example


def test_plan_output_is_what_kfuse_prints(tmp_path):
    """``kfuse plan examples/bicgk.kf`` prints the plan the README shows (the planning time aside),
    and the script shown is the example's file, line for line: the plan's ``(line N)`` is line N
    of the script shown, the call it names."""
    proc = subprocess.run([sys.executable, "-m", "kfuse", "plan", "examples/bicgk.kf"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shown_plan = _output_after("kfuse plan examples/bicgk.kf\n")
    assert _planned(proc.stdout) == _planned(shown_plan)
    shown = _blocks("text")[0].splitlines()
    assert shown == (ROOT / "examples" / "bicgk.kf").read_text().rstrip("\n").splitlines()
    calls = re.findall(r"^\s+(\w+) = (\w+)\(.*\(line (\d+)\)", shown_plan, re.M)
    assert len(calls) == 2
    for out, fn, line in calls:
        assert re.match(rf"{out} = s{fn}\(", shown[int(line) - 1]), (line, shown[int(line) - 1])


def test_jit_example_prints_what_the_readme_shows(capsys):
    """The quick start's ``@kfuse.jit`` block, run as it stands (NumPy arrays: no GPU)."""
    block = next(b for b in _blocks("python") if "@kfuse.jit" in b)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert printed.strip() == _output_after(block).strip()


def test_sample_notice_is_what_kfuse_prints(monkeypatch, caplog, tmp_path):
    from kfuse.cost import calibrated
    from kfuse.runtime import gpu as rgpu
    sample = re.search(r"^kfuse: no GPU here: plans are ranked with .*$", README, re.M).group(0)
    monkeypatch.setattr(rgpu, "gpu_name", lambda: None)
    monkeypatch.setattr(calibrated, "_noticed", set())
    monkeypatch.delenv("KFUSE_CALIBRATION", raising=False)
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    with caplog.at_level(logging.INFO, logger="kfuse"):
        kfuse.compile(ROOT / "examples" / "bicgk.kf")
    notices = [f"kfuse: {r.getMessage()}" for r in caplog.records if "plans are ranked with" in r.getMessage()]
    assert notices == [sample]                          # digest and wording as printed


@pytest.mark.parametrize("command", ["run", "tune"])
def test_command_synopsis_fits_the_headline_script(command):
    """The synopsis's sizes work on the README's first script (BiCGK, which names no size)."""
    from kfuse.cli.util import parse_sizes
    line = next(ln for ln in README.splitlines() if ln.startswith(f"kfuse {command} SCRIPT"))
    words = shlex.split(re.sub(r"\[[^\]]*NAME[^\]]*\]", "", line.split("#", 1)[0]).replace("[", "").replace("]", ""))
    sizes = [words[i + 1] for i, w in enumerate(words) if w == "--size"]
    assert sizes
    prog = kfuse.compile(ROOT / "examples" / "bicgk.kf", tuned=False)
    assert "TILE32x32 A;" in README and "q = sgemv(A, p);" in README
    dims = parse_sizes(prog.program, sizes)
    assert set(dims.values()) == {8192}


def test_synopsis_names_only_real_commands():
    from kfuse.cli.main import parser
    import argparse
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    block = README.split("## Command line", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    named = {ln.split()[1] for ln in block.splitlines() if ln.startswith("kfuse ")}
    assert named == set(sub.choices)                    # every command, and only those


def test_inline_commands_parse():
    """Every ``kfuse ...`` the README's prose names parses with the command line's parser (a command
    that takes a script names one: ``kfuse plan SCRIPT --explain``, not ``kfuse plan --explain``)."""
    from kfuse.cli import parser
    spans = [" ".join(m.split()) for m in re.findall(r"`(kfuse [^`]*)`", README)]
    assert any(s.startswith("kfuse plan ") and "--explain" in s for s in spans), spans
    for span in spans:
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                parser().parse_args(shlex.split(span)[1:])
            except SystemExit:
                pytest.fail(f"README: `{span}` is not a kfuse command line")


def test_loop_figures_are_the_performance_pages():
    """The README's loop figures (CG float32, fori_loop and torch.compile's unrolled graph) are
    those of docs/performance.md's float32 loops table."""
    perf = (ROOT / "docs" / "performance.md").read_text()
    table = perf.split("## Loops: microseconds per iteration (H100, float32)", 1)[1].split("\n## ", 1)[0]
    header = next(ln for ln in table.splitlines() if ln.startswith("| method |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    rows = {(r[0], r[1]): dict(zip(cols, r)) for r in
            ([c.strip() for c in ln.strip("|").split("|")] for ln in table.splitlines() if ln.startswith("| cg |"))}
    line = " ".join(README.split("Loops, CG float32", 1)[1].split("Every table", 1)[0].split())
    big, small = rows["cg", "16384"], rows["cg", "1024"]
    graph = "torch.compile reduce-overhead, 30 steps unrolled"
    assert (f"{big['kfuse fori_loop']} at n = 16384, level with torch.compile ({big['torch.compile']})" in line
            and f"{small['kfuse fori_loop']} at n = 1024 against {small[graph]} for torch.compile's CUDA graph"
            in line), line


def test_notices_from_python_read_as_the_command_lines(tmp_path):
    """A jitted function planned from Python (no logging configured) writes its notices on stderr as
    the command line does, ``kfuse: `` first: the README's sample notice, and nothing else: the
    shipped stencil lap7 is priced by the shipped calibration's kernel factor, without the notice
    of a kernel priced by the transfer model (tests/test_calibration.py has that one)."""
    code = ("import numpy as np, kfuse\n"
            "kfuse.jit(lambda A, x: A @ x).compile(np.zeros((64, 64), np.float32), np.zeros(64, np.float32))\n"
            "kfuse.jit(lambda g: kfuse.lib.lap7(g)).compile(np.zeros((8, 8, 8), np.float32))\n")
    env = {k: v for k, v in os.environ.items() if k != "KFUSE_CALIBRATION"}
    env.update(KFUSE_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT / "src"), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    sample = re.search(r"^kfuse: no GPU here: plans are ranked with .*$", README, re.M).group(0)
    assert lines == [sample], lines


def test_every_linked_page_exists():
    links = re.findall(r"\]\(((?:docs/|LICENSE)[^)#]*)", README)
    assert links and all((ROOT / link).exists() for link in links), links


@pytest.mark.gpu
def test_api_example_runs_on_the_gpu():
    block = next(b for b in _blocks("python") if "import cupy" in b)
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(io.StringIO()):
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})


@pytest.mark.gpu
def test_loop_example_runs_on_the_gpu():
    block = next(b for b in _blocks("python") if "kfuse.while_loop" in b)
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(io.StringIO()):
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
