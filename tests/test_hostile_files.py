"""Forged records and hostile files (issue 44, findings 11-18): tuning plans validated like new
ones, calibration values and reads bounded, ``cache clear`` removing only what it recognises,
bad environment variables said early and cleanly, failed sources written privately, sizes and
duck-typed arrays checked (CPU)."""
from __future__ import annotations

import json
import os
import stat
import threading

import numpy as np
import pytest

import kfuse
from kfuse.cli.main import main
from kfuse.cost import store as cal_store
from kfuse.errors import CalibrationError, KfuseError, TraceError
from kfuse.ir.plan import plan_from_json, plan_to_json
from kfuse.tuning.store import HEADER

from calib_util import synthetic
from conftest import ROOT


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KFUSE_CALIBRATION", raising=False)
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def gemver():
    return kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)


# ---- 11, 12: tuning plans ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["int", "asm", "real", "kf_fill", "main", "threadIdx", "k0_x\u00e9"])
def test_stored_kernel_names_are_kfuse_names(gemver, name):
    """Finding 11: names that are C identifiers but keywords or the prelude's were trusted."""
    data = plan_to_json(gemver.plan)
    data[0]["name"] = name
    with pytest.raises(KfuseError, match="name"):
        plan_from_json(gemver.program, data)


def test_stored_kernel_names_are_distinct(gemver):
    data = plan_to_json(gemver.plan)
    assert len(data) > 1
    data[1]["name"] = data[0]["name"]
    with pytest.raises(KfuseError, match="alike"):
        plan_from_json(gemver.program, data)


def test_stored_kernels_in_dependency_order(gemver):
    """Finding 12: kernels in reverse order gave silent wrong results."""
    data = plan_to_json(gemver.plan)[::-1]
    with pytest.raises(KfuseError, match="before the call that computes"):
        plan_from_json(gemver.program, data)


@pytest.mark.parametrize("stores", [[], [99999]])
def test_stored_plans_store_what_is_needed(gemver, stores):
    """Finding 12: ``"stores": []`` (outputs never written) and ``[99999]`` were accepted."""
    data = plan_to_json(gemver.plan)
    for k in data:
        k["stores"] = stores
    with pytest.raises(KfuseError, match="unstored|does not compute"):
        plan_from_json(gemver.program, data)


def test_a_plan_the_planner_made_is_accepted(gemver):
    back = plan_from_json(gemver.program, json.loads(json.dumps(plan_to_json(gemver.plan))))
    assert back.kernels == gemver.plan.kernels


# ---- 13: calibration --------------------------------------------------------------------------------
def test_calibration_values_are_bounded(lib):
    """Finding 13: entries of 1e308 ns gave an OverflowError when plans were ranked."""
    rec = synthetic(lib, lambda key, probe, env: 10.0).to_json()
    rec["launch_ns"] = 1e308
    rec["sha256"] = cal_store._digest(rec)
    with pytest.raises(CalibrationError, match="launch_ns"):
        cal_store.Calibration.from_json(rec)


def test_calibration_reads_refuse_devices_and_pipes(tmp_path, monkeypatch, capsys):
    """Finding 13: KFUSE_CALIBRATION=/dev/zero read until memory ran out; a FIFO named
    calibration.json in the cache made ``kfuse plan`` and ``kfuse cache list`` hang."""
    warnings = []
    assert cal_store.read_file("/dev/zero", warnings.append) == [] and "regular" in warnings[0]
    cache = tmp_path / "cache"
    cache.mkdir()
    os.mkfifo(cache / "calibration.json")
    os.mkfifo(cache / "tuning.jsonl")
    done = []
    worker = threading.Thread(target=lambda: done.append(main(["cache", "list"])), daemon=True)
    worker.start()
    worker.join(20)
    assert done == [0]
    monkeypatch.setenv("KFUSE_CALIBRATION", "/dev/zero")
    assert main(["plan", str(ROOT / "examples" / "sscal.kf")]) == 0


def test_calibration_read_is_bounded_in_size(tmp_path, monkeypatch):
    from kfuse import fileio
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2000)
    monkeypatch.setattr(fileio, "MAX_FILE_BYTES", 1000)
    with pytest.raises(OSError):
        fileio.read_regular(path, 1000)


# ---- 14: cache clear ---------------------------------------------------------------------------------
def test_cache_clear_removes_only_what_it_recognises(cache_dir, capsys):
    """Finding 14: ``cache clear --yes`` deleted files ``cache list`` called foreign."""
    cache_dir.mkdir()
    (cache_dir / "tuning.jsonl").write_text("my notes\n")
    (cache_dir / "calibration.json").write_text('{"mine": 1}\n')
    assert main(["cache", "clear", "--yes"]) == 1
    assert (cache_dir / "tuning.jsonl").read_text() == "my notes\n"
    assert (cache_dir / "calibration.json").exists()
    assert "left alone" in capsys.readouterr().err


def test_cache_clear_removes_its_files_and_the_lock(cache_dir):
    """Finding 14: the calibration file's lock was left behind."""
    cache_dir.mkdir()
    (cache_dir / "tuning.jsonl").write_text(json.dumps(HEADER) + "\n")
    (cache_dir / "calibration.json").write_text(json.dumps(dict(cal_store.FORMAT, entries=[])))
    (cache_dir / "calibration.json.lock").write_text("")
    assert main(["cache", "clear", "--yes"]) == 0
    assert sorted(os.listdir(cache_dir)) == []


def test_cache_clear_never_through_a_symlinked_folder(tmp_path, monkeypatch):
    """Finding 14: through a symlinked KFUSE_CACHE_DIR it deleted in the target folder."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "tuning.jsonl").write_text(json.dumps(HEADER) + "\n")
    os.symlink(target, tmp_path / "link")
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "link"))
    assert main(["cache", "clear", "--yes"]) == 1
    assert (target / "tuning.jsonl").exists()


# ---- 15, 16: environment variables -----------------------------------------------------------------
def test_bad_nvrtc_options_are_a_clean_early_error(monkeypatch, capsys):
    """Finding 15: KFUSE_NVRTC_OPTIONS="-DX='" was a ValueError at the first GPU call."""
    monkeypatch.setenv("KFUSE_NVRTC_OPTIONS", "-DX='")
    with pytest.raises(KfuseError, match="KFUSE_NVRTC_OPTIONS"):
        kfuse.compile("vector x, y; input x; y = scal(2, x); return y;")
    from kfuse.runtime.compiler import options
    with pytest.raises(KfuseError, match="KFUSE_NVRTC_OPTIONS"):
        options()
    assert main(["plan", str(ROOT / "examples" / "sscal.kf")]) == 1
    assert "KFUSE_NVRTC_OPTIONS" in capsys.readouterr().err


def test_cache_dir_that_is_a_file(tmp_path, monkeypatch, capsys, lib):
    """Finding 16: a KFUSE_CACHE_DIR that is a regular file ended calibrate in FileExistsError
    after its whole measurement run."""
    file = tmp_path / "afile"
    file.write_text("x")
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(file))
    assert main(["calibrate", "--quick"]) == 1
    assert "KFUSE_CACHE_DIR" in capsys.readouterr().err
    with pytest.raises(KfuseError, match="not a folder"):
        cal_store.write_entry(file / "calibration.json", synthetic(lib, lambda *a: 10.0))


# ---- 17: failed sources -------------------------------------------------------------------------------
def test_failed_source_is_written_privately(tmp_path, monkeypatch):
    """Finding 17: $TMPDIR/kfuse-failed/<digest>.cu at a predictable path, following links."""
    from kfuse.runtime.compiler import save_source
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    trap = tmp_path / "kfuse-failed"
    trap.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    import hashlib
    os.symlink(victim, trap / f"{hashlib.sha256(b'src').hexdigest()[:16]}.cu")
    path = save_source("src")
    assert victim.read_text() == "precious" and path.read_text() == "src"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and path.parent != trap


# ---- 18: sizes and duck-typed arrays ---------------------------------------------------------------
@pytest.mark.parametrize("size", [10 ** 400, 2 ** 48 + 1])
def test_api_sizes_are_capped(size):
    """Finding 18: sizes={"x.len": 10**400} was an OverflowError (the CLI caps sizes at 2^48)."""
    with pytest.raises(KfuseError, match="too large"):
        kfuse.compile("vector x, y; input x; y = scal(2, x); return y;", sizes={"x.len": size})


def test_api_size_the_script_fixes_is_not_overridden():
    """sizes={"x.len": 100} for ``vector x[5]`` planned for 100 in silence."""
    src = "vector x[5], y[5]; input x; y = scal(2, x); return y;"
    for key in ("x.len", "5", "y.len"):
        with pytest.raises(KfuseError, match=f"sizes\\['{key}'\\] = 100: the script fixes that size at 5"):
            kfuse.compile(src, sizes={key: 100})
    assert kfuse.compile(src, sizes={"x.len": 5}).search.dims == {0: 5}


class _Duck:
    ndim = 1

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


@pytest.mark.parametrize("shape, dtype", [(("a",), np.float32), ((4,), "nonsense"), ((None,), np.float32),
                                          ((-3,), np.float32), ((10 ** 400,), np.float32)])
def test_duck_typed_arrays_are_checked(shape, dtype):
    """Finding 18: a bad shape or dtype was a ValueError or TypeError from decorator.py."""
    @kfuse.jit
    def f(x, y):
        return x + y

    with pytest.raises(TraceError):
        f.trace(_Duck(shape, dtype), np.zeros(4, np.float32))


# ---- argument types of kfuse.compile, @kfuse.jit and kfuse.load_library -----------------------
SCAL = "vector x, y; input x; y = scal(2, x); return y;"


@pytest.mark.parametrize("key", ["fuse", "shipped_library", "horizontal", "vector_on_strips"])
@pytest.mark.parametrize("value", ["no", None, 0, "False"])
def test_compile_flags_are_bools(key, value):
    """fuse="no" (a non-empty string, so true) fused in silence; None unfused."""
    with pytest.raises(KfuseError, match=f"{key} is True or False, got"):
        kfuse.compile(SCAL, **{key: value})


@pytest.mark.parametrize("kwargs", [{"fuse": "no"}, {"vector_on_strips": 1}])
def test_jit_flags_are_bools(kwargs):
    with pytest.raises(KfuseError, match="is True or False"):
        kfuse.jit(lambda x, y: x + y, **kwargs)


@pytest.mark.parametrize("library", [5, [5], [None], ("lib", 3.0), {"lib"}])
def test_library_arguments_of_the_wrong_type(library):
    """library=[5] and @kfuse.jit(library=5) were TypeErrors from pathlib and list()."""
    with pytest.raises(KfuseError, match="library is a folder"):
        kfuse.compile(SCAL, library=library)
    with pytest.raises(KfuseError, match="library is a folder or a list of folders, got"):
        kfuse.jit(lambda x, y: x + y, library=library)


@pytest.mark.parametrize("folder", [5, None])
def test_load_library_folders_of_the_wrong_type(folder):
    with pytest.raises(KfuseError, match="a library folder is a str or a path"):
        kfuse.load_library(folder)


def test_dtype_of_the_wrong_type():
    """dtype=["float32"] was a TypeError (unhashable) from the membership test."""
    with pytest.raises(KfuseError, match="dtype must be one of float32, float64"):
        kfuse.compile(SCAL, dtype=["float32"])
