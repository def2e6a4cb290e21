"""Forged libraries (issue 44, findings 6-10): expressions that cannot be evaluated, names that
break the file system or the messages, metadata aimed at the CUDA text, barriers in disguise,
and sources swapped after the load -- each a LibraryError (or ExprError) or harmless (CPU)."""
from __future__ import annotations

import os
import time

import pytest

import kfuse
from kfuse.errors import KfuseError, LibraryError
from kfuse.library import expr
from kfuse.library.loader import load_library

from test_library import META, SOURCE, dot_function, dump_functions, load_error, make_library, put, scal_function

SCRIPT = "vector x, y;\ninput x;\ny = myscal(2, x);\nreturn y;\n"


def with_field(key: str, value):
    f = scal_function()
    f[key] = value
    return f


@pytest.mark.parametrize("key, text", [("flops", "x // 0"), ("reference", "1/0 * x"),
                                       ("reference", "np.sum(x, axis=5)")])
def test_expressions_that_cannot_be_evaluated_are_refused_at_load(tmp_path, key, text):
    """Finding 6: a division by a literal zero and an axis no operand has were load-time-valid."""
    err = load_error(make_library(tmp_path / "lib", [with_field(key, text)]))
    assert f"function myscal.{key}" in str(err)


@pytest.mark.parametrize("text, scope, kind", [
    ("x // y", {"x": 1, "y": 0}, "flops"),
    ("-x", {"x": 3}, "flops"),
    ("9e307 ** 8 * x", {"x": 1.0}, "reference"),
    ("(" * 20 + "10" + "**8)" * 20 + " * x", {"x": 1.0}, "reference"),
    ("x / y", {"x": 1, "y": 0}, "reference"),
    ("np.dot(x, y)", {"x": [1.0, 2.0], "y": [1.0]}, "reference"),
])
def test_library_expressions_are_total(text, scope, kind):
    """Finding 6: evaluation crashed (ZeroDivisionError, OverflowError) or never ended (a
    20-deep tower of ** 8 on Python ints); now a clean ExprError, at once."""
    import numpy as np
    scope = {k: np.array(v) if isinstance(v, list) else v for k, v in scope.items()}
    t0 = time.perf_counter()
    with pytest.raises(expr.ExprError) as info:
        expr.evaluate(text, scope, kind)
    assert isinstance(info.value, KfuseError) and time.perf_counter() - t0 < 10   # a hang, not a speed: generous for a loaded machine


def test_source_name_too_long_for_the_file_system(tmp_path):
    """Finding 7: a source name of 5,000 characters was an OSError traceback."""
    f = scal_function()
    f["variant"][0]["source"] = "a" * 5000 + ".cu"
    err = load_error(make_library(tmp_path / "lib", [f]))
    assert "source" in err.field and len(str(err)) < 1000


def test_deeply_dotted_key(tmp_path):
    """Finding 7: a 5,000-deep dotted key was a RecursionError while the error was formatted."""
    folder = make_library(tmp_path / "lib")
    deep = ".".join(["a"] * 5000)
    (folder / "fn.toml").write_text(f'[[function]]\nname = "myscal"\nkind = "map"\nparams.{deep} = 1\n')
    err = load_error(folder)
    assert "params" in err.field and len(str(err)) < 2000


@pytest.mark.parametrize("meta, field", [
    ('[library]\nname = "x\\n#error INJECTED\\n"\n', "library.name"),
    ('[library]\nname = "a\\"b"\n', "library.name"),
    ('[library]\nname = "t"\nversion = "1\\n#error V"\n', "library.version"),
    ('[library]\nname = "t"\n[elements]\ntile = [true, true]\n', "elements"),
])
def test_metadata_aimed_at_the_cuda_text_is_refused(tmp_path, meta, field):
    """Finding 8: a name with a newline put an #error line in the module, a quote broke #line,
    tile = [true, true] gave #define KF_TR True."""
    err = load_error(make_library(tmp_path / "lib", meta=meta))
    assert err.field == field


def test_folder_path_in_line_directives_is_sanitised(tmp_path):
    """Finding 8: a second library's routine files are named by their path in #line directives
    and comments; a quote or a newline in a folder's name cannot break them."""
    folder = make_library(tmp_path / 'we"ird\nname' / "lib", meta=META)
    src = kfuse.compile(SCRIPT, library=[folder], fuse=False).cuda_source
    lines = [ln for ln in src.splitlines() if ln.startswith("#line") and "fn.cu" in ln]
    assert lines and all(ln.count('"') == 2 and "\\" not in ln for ln in lines)
    assert "name/fn.cu" not in src.split("#line")[0] and not any(ln.startswith("name/") for ln in src.splitlines())


@pytest.mark.parametrize("body", [
    'asm volatile("bar.sync 0;");',
    'asm volatile("barrier.sync.aligned 0;" ::: "memory");',
    "SYNC_ALL();",
    "cooperative_groups::this_thread_block().sync();",
    "namespace_cg::sync(cg::this_thread_block());",
])
def test_barriers_in_disguise_are_found(tmp_path, body):
    """Finding 9: asm strings were blanked before the search, token pasting and cooperative
    groups were not searched for."""
    folder = make_library(tmp_path / "lib")
    text = (folder / SOURCE).read_text().replace(
        "void scal_compute(const KfIx& ix, T0& a0, T1& a1, T2 a2) { }",
        "void scal_compute(const KfIx& ix, T0& a0, T1& a1, T2 a2) { " + body + " }")
    assert body in text
    (folder / SOURCE).write_text("#define SYNC_ALL() __sync ## threads()\n" + text)
    err = load_error(folder)
    assert "barrier" in str(err) and err.field.endswith("routine.compute.fn")


def test_a_source_swapped_after_the_load_is_never_compiled(tmp_path):
    """Finding 10: the source was read again when the module was built: a link to an outside file
    put in its place after the check was compiled."""
    folder = make_library(tmp_path / "lib")
    lib = load_library(folder, shipped=True)
    outside = tmp_path / "outside.cu"
    outside.write_text("template <class V0, class V1>\nKF_DEVICE void scal_compute(const KfIx& ix, V0& a0, V1& a1, "
                       "real a2) { __syncthreads(); /* OUTSIDE */ }\n")
    os.remove(folder / SOURCE)
    os.symlink(outside, folder / SOURCE)
    src = kfuse.compile(SCRIPT, library=lib, fuse=False).cuda_source
    assert "OUTSIDE" not in src and "scal_compute" in src
    with pytest.raises(LibraryError):            # loaded again: the link leads out of the folder
        load_library(folder, shipped=True)


# ---- issue 60: a written element taken by value ------------------------------------------------
# By value, a routine gets a copy of a register-held element's view: what it writes to the copy
# never reaches the kernel's output, which is left unwritten (garbage, and no error).

SCAL_SOURCE = ("template <class V>\nKF_DEVICE void blas1_load(const KfIx& ix, const KfVec& g, V& e) { }\n"
               "template <class V>\nKF_DEVICE void blas1_store(const KfIx& ix, V& e, const KfVec& g) { }\n"
               "// out = alpha x\n"
               "template <class VX, class VO>\n"
               "KF_DEVICE void scal_compute(const KfIx& ix,\n"
               "                            VX& x, VO& out, real alpha) { }\n")


def scal_with(tmp_path, old: str, new: str) -> Path:
    folder = make_library(tmp_path / "lib")
    assert old in SCAL_SOURCE
    (folder / SOURCE).write_text(SCAL_SOURCE.replace(old, new))
    return folder


def test_scal_source_by_reference_loads(tmp_path):
    [f] = load_library(scal_with(tmp_path, "", ""), shipped=False).functions
    assert f.name == "myscal"


def test_a_written_element_by_value_is_refused(tmp_path):
    """The message names the routine, its file and line (that of its name), the element, the
    parameter as written and the fix."""
    err = load_error(scal_with(tmp_path, "VO& out", "VO out"))
    assert err.file == str(tmp_path / "lib" / "fn.toml") and err.field == "function myscal.variant.warp.routine.compute.fn"
    assert str(err).endswith(
        "scal_compute (fn.cu:7) takes out, the element it writes (mode w), by value: parameter 3 `VO out` "
        "must be a reference (`VO& out`), else the routine writes a copy and the output is lost"), str(err)


def test_a_load_writing_its_element_by_value_is_refused(tmp_path):
    err = load_error(scal_with(tmp_path, "const KfVec& g, V& e", "const KfVec& g, V e"))
    assert err.field == "function myscal.variant.warp.routine.load_x.fn"
    assert "blas1_load (fn.cu:2) takes x, the element it writes (mode w), by value: parameter 3 `V e`" in str(err)


@pytest.mark.parametrize("old, new", [("VX& x", "VX x"), ("VX& x", "const VX x"),       # compute reads x
                                      ("V& e, const KfVec& g", "V e, const KfVec& g"),  # a store reads
                                      ("VO& out", "VO&& out"), ("VO& out", "const VO& out"),
                                      ("VO& out", "VO &out")])
def test_read_elements_by_value_and_written_ones_by_reference_load(tmp_path, old, new):
    [f] = load_library(scal_with(tmp_path, old, new), shipped=False).functions
    assert f.name == "myscal"


@pytest.mark.parametrize("new", ["KfPair<VO&> out", "VO out = KfRef<VO&>()", "VO /* & */ out"])
def test_an_ampersand_outside_the_declarator_is_no_reference(tmp_path, new):
    """An ``&`` in a template argument, a default value or a comment does not make a reference."""
    err = load_error(scal_with(tmp_path, "VO& out", new))
    assert "takes out, the element it writes (mode w), by value" in str(err)


def test_an_accumulated_element_by_value_is_refused(tmp_path):
    folder = make_library(tmp_path / "lib", [dot_function()])
    text = (folder / SOURCE).read_text()
    old = "void dot_compute(const KfIx& ix, T0& a0, T1& a1, T2& a2)"
    assert old in text
    assert load_library(folder, shipped=False).functions[0].name == "mydot"
    (folder / SOURCE).write_text(text.replace(old, old.replace("T2& a2", "T2 a2")))
    err = load_error(folder)
    assert err.field == "function mydot.variant.warp.routine.compute.fn"
    line = text[:text.index(old)].count("\n") + 1
    assert str(err).endswith(
        f"dot_compute (fn.cu:{line}) takes out, the element it accumulates (mode acc), by value: parameter 4 "
        "`T2 a2` must be a reference (`T2& a2`), else the routine accumulates into a copy and the output "
        "is lost"), str(err)
    (folder / SOURCE).write_text(text.replace(old, old.replace("T0& a0, T1& a1", "T0 a0, T1 a1")))
    assert load_library(folder, shipped=False).functions[0].name == "mydot"      # read ones may be copies


def test_a_by_reference_overload_beside_a_by_value_one_loads(tmp_path):
    """Overloads: one by reference is enough, as for the parameter count (beside it, one by value
    makes the call ambiguous: a compile error, not a lost output); none by reference is refused."""
    by_value = "template <class VX, class VO>\nKF_DEVICE void scal_compute(const KfIx& ix, VX x, VO out, real a) { }\n"
    folder = scal_with(tmp_path, "", "")
    (folder / SOURCE).write_text(by_value + SCAL_SOURCE)
    assert load_library(folder, shipped=False).functions[0].name == "myscal"
    (folder / SOURCE).write_text(by_value + SCAL_SOURCE.replace("VO& out", "VO out"))
    assert "scal_compute (fn.cu:2) takes out" in str(load_error(folder))


@pytest.mark.parametrize("given", [".", ""])
def test_the_working_folder_as_a_library(tmp_path, monkeypatch, given):
    """--library . (or "") was refused as "library.toml: library.name: '': letters, digits ..."
    -- a file that does not exist, and a name nobody gave: the default name is the folder's."""
    folder = make_library(tmp_path / "mylib", meta=None)
    monkeypatch.chdir(folder)
    assert [f.name for f in load_library(given, shipped=False).functions] == ["myscal"]


def test_a_missing_library_folder_says_so(tmp_path):
    """A folder that does not exist was "is not a directory", as a file given is."""
    assert str(load_error(tmp_path / "nolib")).endswith("folder: is not a directory (nothing is there)")
    (tmp_path / "afile").write_text("x")
    assert str(load_error(tmp_path / "afile")).endswith("folder: is not a directory")


def test_a_variant_name_a_stored_plan_cannot_hold_is_refused_at_load(tmp_path):
    """A variant's name goes into a tuned plan's record (ir/plan.plan_problem: at most MAX_NAME
    characters); a longer one loaded, and its tuned plans could never be read back."""
    from kfuse.ir.plan import MAX_NAME
    from kfuse.library.loader import VARIANT_NAME_MAX
    assert VARIANT_NAME_MAX == MAX_NAME
    fn = scal_function()
    fn["variant"][0]["name"] = "v" * (MAX_NAME + 1)
    err = load_error(make_library(tmp_path / "long", [fn]))
    assert err.field.endswith(".name") and f"at most {MAX_NAME}" in str(err)
    fn["variant"][0]["name"] = "v" * MAX_NAME
    lib = load_library(make_library(tmp_path / "ok", [fn]))
    assert any(v.name == "v" * MAX_NAME for f in lib.functions for v in f.variants)
