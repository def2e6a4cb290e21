"""CLI rough edges of issue 44: -v/-q anywhere, shipped examples by name, no planning or notice
before refusing for lack of a GPU (CPU)."""
from __future__ import annotations

import json
import logging
import re

import pytest

from kfuse.cli import main, parser

from test_cli import SSCAL, no_driver  # noqa: F401 - a fixture


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
