"""The README's set-up and examples hold (CPU): Python and nvcc stated, command 1 is what CI runs
and writes only under an ignored folder, the sample notice is the one kfuse prints, the command
synopsis fits the headline script, the API example says it needs CuPy."""
import logging
import re
import shlex
import tomllib

import pytest

import kfuse
from conftest import ROOT

README = (ROOT / "README.md").read_text()
SETUP = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]


def _command_1() -> str:
    block = SETUP.split("```bash", 1)[1].split("```", 1)[0]
    return block.strip().splitlines()[0].split("#", 1)[0].strip()


def test_setup_states_python_and_nvcc():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11" and "Python >= 3.11" in SETUP
    assert "nvcc" in SETUP and "CPU tests" in SETUP


def test_command_1_is_what_ci_runs_and_writes_under_an_ignored_folder():
    cmd = _command_1()
    assert cmd in (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")
    out = shlex.split(cmd)[shlex.split(cmd).index("-o") + 1]
    top = out.split("/")[0]
    assert "/" in out and f"{top}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_command_1_installs_no_cupy_and_the_readme_says_so():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = re.search(r"\.\[(\w+)\]", _command_1()).group(1)
    assert not any("cupy" in d for d in project["dependencies"] + project["optional-dependencies"][extra])
    api = README.split("## Python API", 1)[1].split("```python", 1)
    assert "import cupy" in api[1].split("```", 1)[0]
    assert "CuPy" in api[0] and "'.[gpu]'" in api[0]                 # said before the example


def test_sample_notice_is_what_kfuse_prints(monkeypatch, caplog, tmp_path):
    from kfuse.cost import calibrated
    from kfuse.runtime import gpu as rgpu
    sample = re.search(r"^kfuse: no calibration for this machine .*$", README, re.M).group(0)
    monkeypatch.setattr(rgpu, "gpu_name", lambda: None)
    monkeypatch.setattr(calibrated, "_noticed", set())
    monkeypatch.delenv("KFUSE_CALIBRATION", raising=False)
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    with caplog.at_level(logging.INFO, logger="kfuse"):
        kfuse.compile(ROOT / "examples" / "bicgk.kf")
    notices = [f"kfuse: {r.getMessage()}" for r in caplog.records if "no calibration" in r.getMessage()]
    assert notices == [sample]                          # digest and wording as printed


@pytest.mark.parametrize("command", ["run", "tune"])
def test_command_synopsis_fits_the_headline_script(command):
    """The synopsis's sizes work on the README's first script (BiCGK, which names no size)."""
    from kfuse.cli_util import _parse_sizes
    line = next(ln for ln in README.splitlines() if ln.startswith(f"kfuse {command} SCRIPT"))
    words = shlex.split(re.sub(r"\[[^\]]*NAME[^\]]*\]", "", line.split("#", 1)[0]).replace("[", "").replace("]", ""))
    sizes = [words[i + 1] for i, w in enumerate(words) if w == "--size"]
    assert sizes
    prog = kfuse.compile(ROOT / "examples" / "bicgk.kf", tuned=False)
    assert "TILE32x32 A;" in README and "q = sgemv(A, p);" in README
    dims = _parse_sizes(prog.program, sizes)
    assert set(dims.values()) == {8192}
