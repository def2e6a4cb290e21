"""Trust audit (issue 60), findings 6, 9, 10, 12, 13 and 14: library macro lists capped at load,
environment variables checked against their values with one clean error naming the variable,
floods of warnings and of script text bounded, complex reference values refused (CPU)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kfuse
from kfuse import env
from kfuse.cli.main import main
from kfuse.cost import store as cal_store
from kfuse.errors import KfuseError, ScriptError
from kfuse.library import expr
from kfuse.reference import evaluate
from kfuse.runtime.order import forced_orders

from conftest import ROOT
from test_library import FILE, load_error, make_library, scal_function

SSCAL = str(ROOT / "examples" / "sscal.kf")
SRC = str(Path(kfuse.__file__).parents[1])     # the kfuse under test, for fresh interpreters
SWITCHES = ("KFUSE_PDL", "KFUSE_ALTERNATE", "KFUSE_LOOP_MERGE", "KFUSE_LOOP_PERSISTENT")


@pytest.fixture(autouse=True)
def clean_env(tmp_path, monkeypatch):
    """A cache folder of the test's own and none of the variables under test set."""
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("KFUSE_CALIBRATION", "KFUSE_NVRTC_OPTIONS", "KFUSE_ORDER", "KFUSE_LOOP_WHILE", *SWITCHES):
        monkeypatch.delenv(name, raising=False)


# ---- 6: macro lists --------------------------------------------------------------------------------
def _with_macros(macros: dict) -> dict:
    f = scal_function()
    f["variant"][0]["macros"] = macros
    return f


@pytest.mark.parametrize("macros, field, fragment", [
    ({"A": list(range(1, 1001)), "B": list(range(1, 1001))}, "macros.A", "at most 16 a macro"),
    ({"A": list(range(1, 17)), "B": list(range(1, 17)), "C": [1, 2]}, "macros", "512 combinations"),
    ({f"M{k}": [1] for k in range(17)}, "macros", "at most 16 a variant"),
])
def test_macro_lists_are_capped_at_load(tmp_path, macros, field, fragment):
    """Finding 6: two macros of 1,000 values took ``kfuse plan`` 67 s and 5.4 GB; now the load
    refuses more than 16 values a macro or 256 combinations a variant, naming file and field."""
    err = load_error(make_library(tmp_path / "lib", [_with_macros(macros)]))
    assert err.file.endswith(FILE) and err.field.endswith(field) and fragment in str(err)


def test_macro_caps_leave_room_for_the_shipped_library(tmp_path):
    """The caps are well above what the shipped library uses (it loads), and a variant at the
    caps (two macros of 16 values: 256 combinations) is taken."""
    from kfuse.library.fields import macros_field

    class Ctx:
        def ident(self, name, where):
            return name

        def fail(self, field, message):
            raise AssertionError(field + message)
    got = macros_field(Ctx(), {"A": list(range(1, 17)), "B": list(range(1, 17))}, "v")
    assert len(got["A"]) == len(got["B"]) == 16
    assert kfuse.load_library().functions


# ---- 9: a cache folder no file system takes --------------------------------------------------------
@pytest.mark.parametrize("argv", [["cache", "list"], ["plan", SSCAL]])
def test_cache_dir_name_too_long_is_a_clean_error(tmp_path, monkeypatch, capsys, argv):
    """Finding 9: a KFUSE_CACHE_DIR component over 255 characters was ``OSError: File name too
    long`` from every command."""
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / ("d" * 300) / "kfuse"))
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "KFUSE_CACHE_DIR" in err and "255" in err and "Traceback" not in err
    with pytest.raises(KfuseError, match="KFUSE_CACHE_DIR"):
        env.cache_dir()


# ---- 10: KFUSE_ORDER --------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["1,x", "0,4", "1,,2", "-1,0", "１,0"])
def test_order_of_a_bad_form_is_a_clean_error(monkeypatch, capsys, text):
    """Finding 10: ``KFUSE_ORDER=1,x`` was a bare ValueError at the first launch; now a KfuseError
    naming the variable and its form, at once from the CLI."""
    monkeypatch.setenv("KFUSE_ORDER", text)
    with pytest.raises(KfuseError, match=r"KFUSE_ORDER.*o0,o1,\.\.\..*each 0 to 3"):
        forced_orders(2)
    assert main(["plan", SSCAL]) == 1
    assert "KFUSE_ORDER" in capsys.readouterr().err


def test_order_of_a_wrong_count_is_a_clean_error(monkeypatch):
    monkeypatch.setenv("KFUSE_ORDER", "1, 3")
    assert forced_orders(2) == [1, 3]
    with pytest.raises(KfuseError, match="KFUSE_ORDER.*give 3 order"):
        forced_orders(3)


# ---- 12: every variable checked against its values -------------------------------------------------
@pytest.mark.parametrize("text, on", [("ON", True), ("On", True), ("1", True), ("yes", True),
                                      ("off", False), ("OFF", False), ("0", False), ("False", False)])
def test_switches_take_on_and_off_in_any_case(monkeypatch, text, on):
    """Finding 12: ``KFUSE_LOOP_MERGE=ON`` turned merging off and ``KFUSE_PDL=off`` left PDL on."""
    if not on:      # decided before any GPU is looked at
        from kfuse.runtime.launch import pdl_available
        monkeypatch.setenv("KFUSE_PDL", text)
        assert pdl_available(0) is False
    for name in SWITCHES:
        monkeypatch.setenv(name, text)
        assert env.switch(name) is on


def _import_in_a_process(module: str, attr: str, **variables) -> subprocess.CompletedProcess:
    """``module.attr`` printed by a fresh interpreter with ``variables`` set (the loop modes are
    read as the modules load)."""
    return subprocess.run([sys.executable, "-c", f"import {module} as m; print(m.{attr})"],
                          env={**os.environ, "PYTHONPATH": SRC, **variables}, capture_output=True, text=True)


@pytest.mark.parametrize("module, attr, name, text, shown", [
    ("kfuse.runtime.merged", "MODE", "KFUSE_LOOP_MERGE", "ON", "on"),
    ("kfuse.runtime.persistent", "MODE", "KFUSE_LOOP_PERSISTENT", "On", "on"),
    ("kfuse.runtime.loop", "WHILE_GRAPH", "KFUSE_LOOP_WHILE", "CHUNKS", "False"),
])
def test_loop_modes_read_as_documented(module, attr, name, text, shown):
    got = _import_in_a_process(module, attr, **{name: text})
    assert got.returncode == 0 and got.stdout.strip() == shown, got.stderr[-2000:]
    bad = _import_in_a_process(module, attr, **{name: "sometimes"})
    assert bad.returncode != 0 and f"KfuseError: {name}='sometimes'" in bad.stderr


@pytest.mark.parametrize("name, text, allowed", [
    ("KFUSE_PDL", "of", "on or off"),
    ("KFUSE_ALTERNATE", "2", "on or off"),
    ("KFUSE_LOOP_MERGE", "enabled", "on or off"),
    ("KFUSE_LOOP_PERSISTENT", "onn", "on or off"),
    ("KFUSE_LOOP_WHILE", "chunk", "graph or chunks"),
    ("KFUSE_CALIBRATION", "/no/such/calibration.json", "a calibration file, or off"),
])
def test_values_outside_their_set_are_one_clean_error(monkeypatch, capsys, name, text, allowed):
    """Finding 12: values outside the set were ignored silently (a missing KFUSE_CALIBRATION
    file too); now one error naming the variable and the values it takes."""
    monkeypatch.setenv(name, text)
    assert main(["plan", SSCAL]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and allowed in err, err
    with pytest.raises(KfuseError, match=name):
        env.check()


def test_missing_calibration_file_is_refused_where_it_is_read(monkeypatch):
    monkeypatch.setenv("KFUSE_CALIBRATION", "/no/such/calibration.json")
    with pytest.raises(KfuseError, match="KFUSE_CALIBRATION.*No such file"):
        cal_store.search_paths()
    monkeypatch.setenv("KFUSE_CALIBRATION", "OFF")
    assert cal_store.search_paths() == []


@pytest.mark.parametrize("argv", [["cache", "list"], ["cache", "show"], ["cache", "clear", "--yes"]])
def test_cache_commands_work_whatever_nvrtc_options_hold(monkeypatch, capsys, argv):
    """Finding 12: a bad KFUSE_NVRTC_OPTIONS blocked ``kfuse cache list`` and ``clear``, which
    compile nothing; a command that compiles still refuses it."""
    monkeypatch.setenv("KFUSE_NVRTC_OPTIONS", "-DX='")
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["plan", SSCAL]) == 1
    assert "KFUSE_NVRTC_OPTIONS" in capsys.readouterr().err


def test_environment_page_names_the_values():
    """docs/environment.md says what each switch takes (on/off in any case)."""
    text = (ROOT / "docs" / "environment.md").read_text()
    for name in SWITCHES:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
        assert "`on`" in row and "`off`" in row, row


# ---- 13: floods ---------------------------------------------------------------------------------------
def test_invalid_calibration_entries_are_reported_ten_then_counted(tmp_path, monkeypatch, capsys):
    """Finding 13: 200,000 invalid entries printed 200,009 lines; now ten, then one count."""
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(dict(cal_store.FORMAT, entries=[{"gpu": "x"}] * 5000)))
    said: list[str] = []
    assert cal_store.read_file(path, warn=said.append) == []
    assert len(said) == 11 and said[-1].endswith("... and 4990 more entries ignored")
    monkeypatch.setenv("KFUSE_CALIBRATION", str(path))
    assert main(["cache", "list"]) == 0
    assert len(capsys.readouterr().err.splitlines()) <= 12


@pytest.mark.parametrize("line", [
    "y = scal(2, x); " + " " * 10_000_000 + "return y $;",
    "y = scal(2, " + "x" * 10_000_000 + "); return y;",
], ids=["spaces", "name"])
def test_error_on_a_long_script_line_shows_a_window(tmp_path, capsys, line):
    """Finding 13: an error on a 10 MB script line wrote 20 MB to stderr (the line, and the
    caret's indent as long); now about 200 characters around the column."""
    script = tmp_path / "long.kf"
    script.write_text("vector x, y; input x;\n" + line + "\n")
    assert main(["plan", str(script)]) == 1
    err = capsys.readouterr().err
    assert "long.kf:2:" in err and len(err) < 3000, len(err)


def test_line_window_keeps_the_caret_on_the_column():
    text = "a" * 500 + "X" + "b" * 500
    e = ScriptError("bad", "f", 1, 501, text)
    shown, caret = str(e).splitlines()[1:3]
    assert shown[caret.index("^")] == "X" and shown.strip().startswith("...") and shown.endswith("...")
    short = str(ScriptError("bad", "f", 1, 3, "abcdef")).splitlines()
    assert short[1:] == ["    abcdef", "      ^"]


# ---- 14: complex reference values ---------------------------------------------------------------------
def test_complex_reference_values_are_refused(tmp_path):
    """Finding 14: a reference yielding complex values (a negative number ** 0.5) was cast to
    real with a NumPy warning; now an ExprError naming the expression."""
    f = scal_function()
    f["reference"] = "alpha ** 0.5 * x"
    lib = kfuse.load_library(make_library(tmp_path / "lib", [f]))
    prog = kfuse.compile("vector x, y;\ninput x;\ny = myscal(-2, x);\nreturn y;\n", library=lib, fuse=False)
    with pytest.raises(expr.ExprError, match=r"'alpha \*\* 0.5 \* x' came out complex"):
        evaluate(prog.program, {"x": np.ones(4)})
    with pytest.raises(expr.ExprError, match="complex"):
        expr.evaluate("alpha ** 0.5 * x", {"alpha": -1.0, "x": np.ones(2)}, "reference")
    assert expr.evaluate("alpha ** 0.5 * x", {"alpha": 4.0, "x": np.ones(2)}, "reference").tolist() == [2.0, 2.0]


def test_cache_clear_leaves_a_calibration_whose_lock_is_held(tmp_path, monkeypatch, capsys):
    """Finding 16: ``cache clear`` deleted calibration.json.lock while a calibration held it (a
    second writer would then lock a new file beside the first); now both stay, with a reason."""
    import fcntl

    from kfuse.cli.main import main
    from kfuse.cost import store as cal_store
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    (tmp_path / "calibration.json").write_text(json.dumps(dict(cal_store.FORMAT, entries=[])))
    lock = tmp_path / "calibration.json.lock"
    lock.write_text("")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert main(["cache", "clear", "--calibration", "--yes"]) == 1
        assert lock.exists() and (tmp_path / "calibration.json").exists()
        assert "its lock is held" in capsys.readouterr().err
    finally:
        os.close(fd)
    assert main(["cache", "clear", "--calibration", "--yes"]) == 0           # released: both go
    assert not lock.exists() and not (tmp_path / "calibration.json").exists()
