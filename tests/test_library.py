"""The library loader: the shipped BLAS library, user folders, and every validation error (CPU)."""
from __future__ import annotations

import copy
import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from kfuse.errors import KfuseError, LibraryError
from kfuse.library.loader import SHIPPED, load_library

# ------------------------------------------------------------------------------------------
# Building temporary library folders
# ------------------------------------------------------------------------------------------

META = '[library]\nname = "test"\nversion = "1"\n\n[elements]\nsubvector = 32\ntile = [32, 32]\n'
SOURCE = "fn.cu"
FILE = "fn.toml"


def scal_function() -> dict:
    """A map function, a copy of the shipped scal (renamed so that it can sit beside it)."""
    return {
        "name": "myscal",
        "reference": "alpha * x",
        "aliases": ["myscal_s"],
        "kind": "map",
        "math": "out = alpha x",
        "doc": "Scale a vector.",
        "params": [
            {"name": "alpha", "type": "scalar", "dir": "in", "index": []},
            {"name": "x", "type": "vector", "dir": "in", "index": ["i"]},
            {"name": "out", "type": "vector", "dir": "out", "index": ["i"]},
        ],
        "variant": [{
            "name": "warp",
            "source": SOURCE,
            "threads": [32, 1],
            "instances_per_block": [1, 2, 4, 8, 16, 32],
            "routines": [
                {"name": "load_x", "fn": "blas1_load", "args": ["&x", "x:w:lane"]},
                {"name": "compute", "fn": "scal_compute", "args": ["x:r:lane", "out:w:lane", "alpha"]},
                {"name": "store_out", "fn": "blas1_store", "args": ["out:r:lane", "&out"]},
            ],
        }],
    }


def dot_function() -> dict:
    """A reduce function (copy of the shipped dot)."""
    return {
        "name": "mydot",
        "reference": "np.dot(x, y)",
        "kind": "reduce",
        "params": [
            {"name": "x", "type": "vector", "dir": "in", "index": ["i"]},
            {"name": "y", "type": "vector", "dir": "in", "index": ["i"]},
            {"name": "out", "type": "scalar", "dir": "out", "index": [], "reduce": "sum"},
        ],
        "variant": [{
            "name": "warp",
            "source": SOURCE,
            "threads": [32, 1],
            "routines": [
                {"name": "load_x", "fn": "blas1_load", "args": ["&x", "x:w:lane"]},
                {"name": "load_y", "fn": "blas1_load", "args": ["&y", "y:w:lane"]},
                {"name": "compute", "fn": "dot_compute", "args": ["x:r:lane", "y:r:lane", "out:acc:thread"]},
                {"name": "store_out", "fn": "dot_store", "args": ["out:r:thread", "&out"]},
            ],
        }],
    }


def madd_function() -> dict:
    """A nested map-map function (copy of the shipped madd)."""
    return {
        "name": "mymadd",
        "reference": "A + B",
        "kind": "map-map",
        "params": [
            {"name": "A", "type": "matrix", "dir": "in", "index": ["i", "j"]},
            {"name": "B", "type": "matrix", "dir": "in", "index": ["i", "j"]},
            {"name": "out", "type": "matrix", "dir": "out", "index": ["i", "j"]},
        ],
        "variant": [{
            "name": "rows",
            "source": SOURCE,
            "threads": [32, "BY"],
            "macros": {"BY": [4, 8, 16]},
            "routines": [
                {"name": "load_A", "fn": "tile_load", "args": ["&A", "A:w:rows"]},
                {"name": "load_B", "fn": "tile_load", "args": ["&B", "B:w:rows"]},
                {"name": "compute", "fn": "madd_compute", "args": ["A:r:rows", "B:r:rows", "out:w:rows"]},
                {"name": "store_out", "fn": "tile_store", "args": ["out:r:rows", "&out"]},
            ],
        }],
    }


def gemv_function() -> dict:
    """A nested map-reduce function with a local (copy of the shipped gemv's smem variant)."""
    return {
        "name": "mygemv",
        "reference": "A @ x",
        "kind": "map-reduce",
        "params": [
            {"name": "A", "type": "matrix", "dir": "in", "index": ["i", "j"]},
            {"name": "x", "type": "vector", "dir": "in", "index": ["j"]},
            {"name": "out", "type": "vector", "dir": "out", "index": ["i"], "reduce": "sum"},
        ],
        "variant": [{
            "name": "smem",
            "source": SOURCE,
            "threads": [32, "BY"],
            "macros": {"BY": [4, 8]},
            "locals": [{"name": "part", "element": "tile", "shape": ["BY", 32]}],
            "routines": [
                {"name": "load_A", "fn": "tile_load", "args": ["&A", "A:w:rows"]},
                {"name": "load_x", "fn": "colvec_load", "args": ["&x", "x:w:lane"], "threads": [32, 1]},
                {"name": "compute_partial", "fn": "gemv_smem_partial", "args": ["A:r:any", "x:r:any", "part:w:rows"]},
                {"name": "compute_finish", "fn": "gemv_smem_finish", "args": ["part:r:any", "out:acc:lane"],
                 "threads": [32, 1]},
                {"name": "store_out", "fn": "lane_rowvec_store", "args": ["out:r:lane", "&out"], "threads": [32, 1]},
            ],
        }],
    }


def wide_gemtv_function() -> dict:
    """A nested map-reduce function blocking its instances as its own tiles, whose store is
    staged by a finish routine (copy of the shipped gemtv's wide variant)."""
    return {
        "name": "mygemtv",
        "reference": "A.T @ x",
        "kind": "map-reduce",
        "params": [
            {"name": "A", "type": "matrix", "dir": "in", "index": ["i", "j"]},
            {"name": "x", "type": "vector", "dir": "in", "index": ["i"]},
            {"name": "out", "type": "vector", "dir": "out", "index": ["j"], "reduce": "sum"},
        ],
        "variant": [{
            "name": "wide",
            "source": SOURCE,
            "threads": [32, "BY"],
            "tile": [32, "TC"],
            "macros": {"BY": [4, 8], "TC": [128, 256]},
            "locals": [{"name": "part", "element": "tile", "shape": ["BY", "TC"]}],
            "routines": [
                {"name": "load_A", "fn": "wtile_load", "args": ["&A", "A:w:qrows"]},
                {"name": "load_x", "fn": "wrowvec_load", "args": ["&x", "x:w:split"]},
                {"name": "compute", "fn": "gemtv_wcompute", "args": ["A:r:qrows", "x:r:split", "out:acc:qcolpart"]},
                {"name": "finish_out", "fn": "wcolsum_gather", "args": ["out:r:qcolpart", "part:w:any"]},
                {"name": "store_out", "fn": "wcolsum_store", "args": ["part:r:any", "&out"]},
            ],
        }],
    }


BASES = {"scal": scal_function, "dot": dot_function, "madd": madd_function, "gemv": gemv_function,
         "wide": wide_gemtv_function}


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def dump_functions(functions: list[dict], top: dict | None = None) -> str:
    """TOML text of a function file: ``[[function]]`` tables with ``[[function.variant]]`` tables."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in (top or {}).items()]
    for f in functions:
        lines.append("\n[[function]]")
        variants = f.get("variant")
        as_tables = isinstance(variants, list) and bool(variants) and all(isinstance(v, dict) for v in variants)
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in f.items() if not (k == "variant" and as_tables)]
        if as_tables:
            for v in variants:
                lines.append("\n[[function.variant]]")
                lines += [f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()]
    return "\n".join(lines) + "\n"


def make_library(root: Path, functions: list[dict] | str | None = None, meta: str | None = META,
                 sources: tuple[str, ...] = (SOURCE,), file: str = FILE) -> Path:
    """A library folder: ``library.toml`` (unless meta is None), one function file and .cu files.

    ``functions`` is a list of function dicts (default: the scal copy) or raw TOML text."""
    root.mkdir(parents=True, exist_ok=True)
    if meta is not None:
        (root / "library.toml").write_text(meta)
    if functions is None:
        functions = [scal_function()]
    text = functions if isinstance(functions, str) else dump_functions(functions)
    (root / file).write_text(text)
    stubs = stub_sources(functions, text)
    for s in sources:
        (root / s).write_text(stubs.get(s, "// no routines\n"))
    return root


def stub_sources(functions: list[dict] | str, text: str) -> dict[str, str]:
    """Source file -> a definition of every routine its variants name, with the template
    parameters the loader checks for (the variant's macros, then a class per argument: the
    barrier check compiles them, codegen/barrier_check.py), element arguments by reference."""
    if isinstance(functions, str):
        try:
            functions = tomllib.loads(text).get("function", [])
        except tomllib.TOMLDecodeError:
            return {}
    out: dict[str, dict[str, None]] = {}
    for f in functions if isinstance(functions, list) else []:
        for v in (f.get("variant") or []) if isinstance(f, dict) else []:
            if not isinstance(v, dict) or not isinstance(v.get("source"), str):
                continue
            macros = list(v.get("macros") or {}) if isinstance(v.get("macros"), dict) else []
            for r in v.get("routines") or []:
                if not isinstance(r, dict) or not isinstance(r.get("fn"), str) or not isinstance(r.get("args"), list):
                    continue
                args = [a for a in r["args"] if isinstance(a, str)]
                tpl = [f"int {m}" for m in macros] + [f"class T{n}" for n in range(len(args))]
                # elements (NAME:MODE:MAPPING) by reference, as the loader requires of those written
                params = ["const KfIx& ix"] + [f"T{n}{'&' if a.count(':') == 2 else ''} a{n}"
                                               for n, a in enumerate(args)]
                head = f"template <{', '.join(tpl)}>\n" if tpl else ""
                out.setdefault(v["source"], {})[f"{head}KF_DEVICE void {r['fn']}({', '.join(params)}) {{ }}\n"] = None
    return {k: "".join(v) for k, v in out.items()}


def load_error(*folders: Path, shipped: bool = False) -> LibraryError:
    with pytest.raises(LibraryError) as info:
        load_library(*folders, shipped=shipped)
    return info.value


def assert_names(err: LibraryError, file: Path | str, field: str, fragment: str = "") -> None:
    """The error names the file and the field (attributes and message) and says what is wrong."""
    assert isinstance(err, KfuseError)
    assert err.file == str(file)
    assert err.field == field
    text = str(err)
    assert text.startswith(f"{file}: {field}: "), text
    assert str(file) in text and field in text
    assert fragment in text, text


# -- mutators: functions of a function dict ----------------------------------------------

def _walk(data, path):
    for key in path[:-1]:
        data = data[key]
    return data, path[-1]


def put(*path, value):
    def mutate(f):
        parent, key = _walk(f, path)
        parent[key] = value
    return mutate


def drop(*path):
    def mutate(f):
        parent, key = _walk(f, path)
        del parent[key]
    return mutate


def both(*mutators):
    def mutate(f):
        for m in mutators:
            m(f)
    return mutate


R = ("variant", 0, "routines")      # path of the first variant's routines
V = ("variant", 0)                  # path of the first variant


# ------------------------------------------------------------------------------------------
# The shipped library
# ------------------------------------------------------------------------------------------

def test_shipped_library_loads(lib):
    shipped = load_library(shipped=True)
    assert shipped.name == "blas" and shipped.version == "1"
    assert shipped.root == SHIPPED
    assert shipped.subvector == 32 and shipped.tile == (32, 32)
    assert len(shipped.functions) == 23      # BLAS-1, BLAS-2, symmetric, the sparse mat-vec and six stencils
    assert [f.name for f in shipped.functions].count("gemv") == 3
    assert {f.name for f in shipped.functions} == {
        "scal", "axpy", "axpby", "vadd", "vmul", "dot", "gemv", "gemtv", "ger", "madd", "symv", "trmv", "spmv",
        "lap5", "lap7", "lap27", "lap5v", "lap7v", "lap27v"}
    assert {f.name for f in shipped.functions if f.triangle == "upper"} == {"symv", "trmv"}
    assert shipped == lib


def test_shipped_gemv_overloads_by_arity(lib):
    overloads = lib.overloads("gemv")
    assert [len(f.inputs) for f in overloads] == [2, 3, 5]
    assert all(f.kind == "map-reduce" and f.nesting == 2 for f in overloads)
    assert [len(f.inputs) for f in lib.overloads("gemtv")] == [2, 3, 5]
    assert overloads[0].signature == "vector out = gemv(matrix A, vector x)"


def test_shipped_aliases_resolve(lib):
    assert lib.overloads("sgemv") == lib.overloads("gemv")
    assert lib.overloads("dgemv") == lib.overloads("gemv")
    assert lib.overloads("sscal") == lib.overloads("scal")
    assert lib.overloads("gemvt") == lib.overloads("gemtv")
    assert lib.overloads("no_such_function") == ()


def test_shipped_functions_have_references(lib):
    for f in lib.functions:
        if any(p.type == "csr" for p in f.params):
            continue            # the float64 reference evaluator has no sparse matrices (tests/test_gpu_sparse.py)
        assert isinstance(f.reference, str) and f.reference.strip(), f.name
        compile(f.reference, f.name, "eval")


def test_shipped_digest_is_stable():
    a, b = load_library(), load_library(shipped=True)
    assert a.digest == b.digest
    assert re.fullmatch(r"[0-9a-f]{16}", a.digest)


def test_shipped_parameters(lib):
    gemtv5 = lib.overloads("gemtv")[2]
    y = gemtv5.param("y")
    assert y.hoist is False and y.partial is True    # invariant = false, partial = true
    x = gemtv5.param("x")
    assert x.hoist is True and x.partial is False    # the defaults
    assert gemtv5.param("A").pad == 1                # matrices are padded by default
    assert x.pad == 0
    out = lib.overloads("dot")[0].param("out")
    assert out.reduce == "sum" and out.on_chip and out.index == ()
    assert not lib.overloads("scal")[0].param("alpha").on_chip
    smem = lib.overloads("gemv")[0].variants[1]
    assert smem.name == "smem" and smem.macros == {"BY": (4, 8)}
    assert [loc.name for loc in smem.locals] == ["part"]
    assert smem.routine("load_x").threads == (32, 1) and smem.routine("load_A").threads == (32, "BY")
    assert lib.overloads("scal")[0].variants[0].instances_per_block == (1, 2, 4, 8, 16, 32)
    assert lib.overloads("madd")[0].variants[0].instances_per_block == (1,)


def test_shipped_functions_have_flops(lib):
    for f in lib.functions:
        if any(p.type == "csr" for p in f.params):
            continue        # flops are an expression of entry counts; a csr's are not its non-zeros
        assert isinstance(f.flops, str) and f.flops.strip(), f.name


# ------------------------------------------------------------------------------------------
# Valid user folders
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("base", sorted(BASES))
def test_valid_temporary_library(tmp_path, base):
    f = BASES[base]()
    folder = make_library(tmp_path / "lib", [f])
    loaded = load_library(folder, shipped=False)
    assert loaded.name == "test" and loaded.root == folder
    assert [g.name for g in loaded.functions] == [f["name"]]
    g = loaded.functions[0]
    assert g.file == folder / FILE
    assert g.variants[0].source == folder / SOURCE
    assert g.reference == f["reference"]


def test_optional_param_and_function_fields(tmp_path):
    f = gemv_function()
    f["flops"] = "2 * A + out"
    f["params"][1].update(invariant=False, partial=True, pad=0)
    f["params"][0]["pad"] = 2
    loaded = load_library(make_library(tmp_path / "lib", [f]), shipped=False)
    g = loaded.functions[0]
    assert g.flops == "2 * A + out"
    x = g.param("x")
    assert (x.hoist, x.partial, x.pad) == (False, True, 0)
    assert g.param("A").pad == 2 and g.param("A").hoist is True
    assert g.variants[0].instances_per_block == (1,)                  # nested default
    d = load_library(make_library(tmp_path / "lib2", [dot_function()]), shipped=False).functions[0]
    assert d.variants[0].instances_per_block == (1, 2, 4, 8, 16)     # unnested default
    assert d.flops is None


def test_library_toml_is_optional(tmp_path):
    folder = make_library(tmp_path / "mylib", meta=None)
    loaded = load_library(folder, shipped=False)
    assert loaded.name == "mylib" and loaded.version == "0"
    assert loaded.subvector == 32 and loaded.tile == (32, 32)


def test_integer_version_and_custom_element_sizes(tmp_path):
    meta = '[library]\nversion = 3\n[elements]\nsubvector = 64\ntile = [16, 64]\n'
    loaded = load_library(make_library(tmp_path / "l", meta=meta), shipped=False)
    assert loaded.version == "3" and loaded.subvector == 64 and loaded.tile == (16, 64)


def test_user_folder_adds_to_shipped(tmp_path, lib):
    folder = make_library(tmp_path / "user")
    loaded = load_library(folder)
    assert len(loaded.functions) == len(lib.functions) + 1
    (mine,) = loaded.overloads("myscal")
    assert loaded.overloads("myscal_s") == (mine,)
    assert mine.file == folder / FILE
    assert loaded.overloads("gemv") == lib.overloads("gemv")
    assert loaded.name == "blas" and loaded.root == SHIPPED
    assert loaded.digest != lib.digest


def test_user_overload_of_a_shipped_name_with_another_arity(tmp_path, lib):
    f = scal_function()
    f["name"], f["aliases"] = "scal", []
    f["params"] = f["params"][1:]                             # out = scal(x): one input
    f["reference"] = "2 * x"
    f["variant"][0]["routines"][1]["args"] = ["x:r:lane", "out:w:lane"]
    loaded = load_library(make_library(tmp_path / "user", [f]))
    assert [len(g.inputs) for g in loaded.overloads("scal")] == [2, 1]


def test_copy_of_shipped_folder(tmp_path, lib):
    copy_dir = tmp_path / "blas_copy"
    shutil.copytree(SHIPPED, copy_dir)
    alone = load_library(copy_dir, shipped=False)
    assert len(alone.functions) == 23 and alone.digest == lib.digest and alone.root == copy_dir
    err = load_error(copy_dir, shipped=True)      # every function is now defined twice
    assert_names(err, copy_dir / "blas1.toml", "function.name",
                 f"scal with 2 inputs is already defined in {SHIPPED / 'blas1.toml'}")


def test_digest_depends_on_sources(tmp_path):
    folder = make_library(tmp_path / "l")
    before = load_library(folder, shipped=False).digest
    assert load_library(folder, shipped=False).digest == before
    (folder / SOURCE).write_text((folder / SOURCE).read_text() + "// changed\n")
    assert load_library(folder, shipped=False).digest != before


# ------------------------------------------------------------------------------------------
# Folder-level and library.toml errors
# ------------------------------------------------------------------------------------------

def test_no_folder_at_all():
    err = load_error()
    assert_names(err, "<none>", "folders", "no library folder given")


def test_folder_that_is_not_a_directory(tmp_path):
    path = tmp_path / "file.toml"
    path.write_text("")
    assert_names(load_error(path), path, "folder", "is not a directory")
    missing = tmp_path / "missing"
    assert_names(load_error(missing, shipped=True), missing, "folder", "is not a directory")


@pytest.mark.parametrize("meta, field, fragment", [
    ("[library\nname = 'x'\n", "toml", ""),
    ("[library]\nname = 'x'\nauthor = 'me'\n", "library.author", "unknown field"),
    ("[elements]\nsubvector = 32\nvector = 4\n", "elements.vector", "unknown field"),
    ("library = 'x'\n", ".library", "expected dict, got str"),
    ("elements = 32\n", ".elements", "expected dict, got int"),
    ("[library]\nname = 5\n", "library.name", "expected str, got int 5"),
    ("[library]\nversion = 1.5\n", "library.version", "expected str or int, got float"),
    ("[elements]\nsubvector = '32'\n", "elements.subvector", "expected int, got str"),
    ("[elements]\nsubvector = true\n", "elements.subvector", "expected int, got bool"),
    ("[elements]\ntile = 32\n", "elements.tile", "expected list, got int"),
    ("[elements]\nsubvector = 0\n", "elements", "subvector must be a positive int"),
    ("[elements]\ntile = [32]\n", "elements", "tile a list of two"),
    ("[elements]\ntile = [32, 0]\n", "elements", "tile a list of two"),
    ("[elements]\ntile = [32, '32']\n", "elements", "tile a list of two"),
], ids=["syntax", "library-field", "elements-field", "library-type", "elements-type", "name-type",
        "version-type", "subvector-type", "subvector-bool", "tile-type", "subvector-zero",
        "tile-length", "tile-zero", "tile-str"])
def test_library_toml_errors(tmp_path, meta, field, fragment):
    folder = make_library(tmp_path / "l", meta=meta)
    assert_names(load_error(folder), folder / "library.toml", field, fragment)


def test_element_sizes_conflict_between_folders(tmp_path):
    folder = make_library(tmp_path / "l", meta="[elements]\nsubvector = 64\n")
    err = load_error(folder, shipped=True)
    assert_names(err, folder / "library.toml", "elements",
                 "element sizes 64, (32, 32) differ from the first library's 32, (32, 32)")
    first = make_library(tmp_path / "a", meta="[elements]\ntile = [16, 16]\n")
    second = make_library(tmp_path / "b", [dot_function()])
    assert_names(load_error(first, second), second / "library.toml", "elements", "differ")


def test_same_function_and_arity_in_two_folders(tmp_path):
    a = make_library(tmp_path / "a")
    b = make_library(tmp_path / "b")
    err = load_error(a, b)
    assert_names(err, b / FILE, "function.name",
                 f"myscal with 2 inputs is already defined in {a / FILE}")


def test_user_function_clashes_with_shipped(tmp_path):
    f = scal_function()
    f["name"], f["aliases"] = "scal", []
    folder = make_library(tmp_path / "user", [f])
    err = load_error(folder, shipped=True)
    assert_names(err, folder / FILE, "function.name",
                 f"scal with 2 inputs is already defined in {SHIPPED / 'blas1.toml'}")


def test_user_alias_clashes_with_shipped_alias(tmp_path):
    f = scal_function()
    f["aliases"] = ["sscal"]
    folder = make_library(tmp_path / "user", [f])
    assert_names(load_error(folder, shipped=True), folder / FILE, "function.name",
                 "sscal with 2 inputs is already defined")


def test_same_function_twice_in_one_file(tmp_path):
    folder = make_library(tmp_path / "l", [scal_function(), scal_function()])
    assert_names(load_error(folder), folder / FILE, "function.name", "myscal with 2 inputs")


# ------------------------------------------------------------------------------------------
# Function-file errors (one per raise in the loader)
# ------------------------------------------------------------------------------------------

def test_function_file_bad_toml_syntax(tmp_path):
    folder = make_library(tmp_path / "l", "[[function]]\nname = \"x\nkind = \"map\"\n")
    err = load_error(folder)
    assert_names(err, folder / FILE, "toml")
    assert "line 2" in str(err)


@pytest.mark.parametrize("text, field, fragment", [
    ("", ".function", "missing"),
    ("function = 1\n", ".function", "expected list, got int"),
    ("format = 2\n[[function]]\nname = 'x'\n", ".format", "unknown field (allowed: function)"),
], ids=["empty", "function-type", "unknown-top-level"])
def test_function_file_top_level(tmp_path, text, field, fragment):
    folder = make_library(tmp_path / "l", text)
    assert_names(load_error(folder), folder / FILE, field, fragment)


F = "function myscal"
P = "function myscal.params"
W = "function myscal.variant.warp"
RT = "function myscal.variant.warp.routine"

CASES = [
    # id, base, mutator, field, message fragment
    # -- function table
    ("unknown-field", "scal", put("author", value="me"), "function[0].author", "unknown field"),
    ("missing-name", "scal", drop("name"), "function[0].name", "missing"),
    ("name-type", "scal", put("name", value=3), "function[0].name", "expected str, got int 3"),
    ("bad-name", "scal", put("name", value="my-scal"), "function[0].name",
     "'my-scal' is not a usable identifier"),
    ("reserved-name", "scal", put("name", value="tx"), "function[0].name", "'tx' is not a usable identifier"),
    ("missing-kind", "scal", drop("kind"), f"{F}.kind", "missing"),
    ("kind-type", "scal", put("kind", value=["map"]), f"{F}.kind", "expected str, got list"),
    ("bad-kind", "scal", put("kind", value="zip"), f"{F}.kind",
     "'zip' is not one of map, reduce, map-map, map-reduce"),
    ("aliases-type", "scal", put("aliases", value="sscal"), f"{F}.aliases", "expected list, got str"),
    ("bad-alias", "scal", put("aliases", value=["ok", "not ok"]), f"{F}.aliases",
     "'not ok' is not a usable identifier"),
    ("doc-type", "scal", put("doc", value=1), f"{F}.doc", "expected str"),
    ("math-type", "scal", put("math", value=False), f"{F}.math", "expected str, got bool"),
    ("missing-params", "scal", drop("params"), f"{F}.params", "missing"),
    ("params-type", "scal", put("params", value={"x": 1}), f"{F}.params", "expected list, got dict"),
    ("param-not-table", "scal", put("params", 0, value="alpha"), f"{P}[0]", "expected a table"),
    ("param-unknown-field", "scal", put("params", 1, "sizes", value=3), f"{P}[1].sizes", "unknown field"),
    ("param-missing-name", "scal", drop("params", 1, "name"), f"{P}[1].name", "missing"),
    ("param-bad-name", "scal", put("params", 1, "name", value="2x"), f"{P}[1].name",
     "'2x' is not a usable identifier"),
    ("param-reserved-name", "scal", put("params", 1, "name", value="k"), f"{P}[1].name",
     "'k' is not a usable identifier"),
    ("duplicate-params", "scal", put("params", 0, "name", value="x"), f"{P}", "duplicate parameter name"),
    ("no-output", "scal", put("params", 2, "dir", value="in"), f"{P}", "no output parameter"),
    ("missing-type", "scal", drop("params", 1, "type"), f"{P}.x.type", "missing"),
    ("bad-type", "scal", put("params", 1, "type", value="tensor"), f"{P}.x.type",
     "'tensor' is not one of scalar, vector, matrix"),
    ("missing-dir", "scal", drop("params", 1, "dir"), f"{P}.x.dir", "missing"),
    ("bad-dir", "scal", put("params", 1, "dir", value="inout"), f"{P}.x.dir", "'inout' is not 'in' or 'out'"),
    ("index-type", "scal", put("params", 1, "index", value="i"), f"{P}.x.index", "expected list, got str"),
    ("index-count", "scal", put("params", 1, "index", value=[]), f"{P}.x.index",
     "a vector follows 1 instance axes, got []"),
    ("index-count-scalar", "scal", put("params", 0, "index", value=["i"]), f"{P}.alpha.index",
     "a scalar follows 0 instance axes"),
    ("index-unknown-axis", "scal", put("params", 1, "index", value=["j"]), f"{P}.x.index",
     "axes must be distinct and among ['i'], got ['j']"),
    ("index-repeated-axis", "madd", put("params", 0, "index", value=["i", "i"]),
     "function mymadd.params.A.index", "axes must be distinct"),
    ("matrix-index-order", "madd", put("params", 0, "index", value=["j", "i"]),
     "function mymadd.params.A.index", "a matrix follows the instance axes in order"),
    ("reduce-on-input", "scal", put("params", 1, "reduce", value="sum"), f"{P}.x.reduce",
     "only outputs are reduced"),
    ("reduce-type", "dot", put("params", 2, "reduce", value=1), "function mydot.params.out.reduce",
     "expected str, got int"),
    ("bad-reduce-op", "dot", put("params", 2, "reduce", value="prod"), "function mydot.params.out.reduce",
     "'prod' is not one of sum, max, min"),
    ("reduce-all-axes", "scal", put("params", 2, "reduce", value="sum"), f"{P}.out.reduce",
     "a reduced output must leave out at least one instance axis"),
    ("reduce-all-axes-nested", "gemv", both(put("params", 2, "type", value="matrix"), put("params", 2, "index", value=["i", "j"])),
     "function mygemv.params.out.reduce", "leave out at least one instance axis"),
    ("map-output-missing-axis", "scal",
     both(put("params", 2, "type", value="scalar"), put("params", 2, "index", value=[])),
     f"{P}.out.index", "a map output must follow every instance axis ['i']"),
    ("map-output-missing-axis-nested", "gemv", drop("params", 2, "reduce"),
     "function mygemv.params.out.index", "a map output must follow every instance axis ['i', 'j']"),
    ("invariant-type", "scal", put("params", 0, "invariant", value="yes"), f"{P}.alpha.invariant",
     "expected bool, got str"),
    ("output-invariant-false", "dot", put("params", 2, "invariant", value=False),
     "function mydot.params.out.invariant", "an output's invariance follows from its index and the loop axis"),
    ("output-invariant-true", "scal", put("params", 2, "invariant", value=True), f"{P}.out.invariant",
     "an output's invariance follows from its index"),
    ("pad-on-vector", "scal", put("params", 1, "pad", value=1), f"{P}.x.pad",
     "padding is a non-negative number of entries per tile row"),
    ("negative-pad", "madd", put("params", 0, "pad", value=-1), "function mymadd.params.A.pad",
     "non-negative"),
    ("pad-type", "madd", put("params", 0, "pad", value=1.5), "function mymadd.params.A.pad",
     "expected int, got float"),
    ("partial-type", "gemv", put("params", 1, "partial", value="yes"), "function mygemv.params.x.partial",
     "expected bool, got str"),
    ("partial-on-output", "gemv", put("params", 2, "partial", value=True), "function mygemv.params.out.partial",
     "only vector or scalar inputs can take partial sums"),
    ("partial-on-matrix", "gemv", put("params", 0, "partial", value=True), "function mygemv.params.A.partial",
     "only vector or scalar inputs can take partial sums"),
    ("map-with-reduce-output", "dot", put("kind", value="map"), "function mydot.kind",
     "map function has reduce output out"),
    ("map-map-with-reduce-output", "gemv", put("kind", value="map-map"), "function mygemv.kind",
     "map-map function has reduce output out"),
    ("reduce-without-reduce-output", "scal", put("kind", value="reduce"), f"{F}.kind",
     "reduce function has no output with reduce = ..."),
    ("map-reduce-without-reduce-output", "madd", put("kind", value="map-reduce"), "function mymadd.kind",
     "map-reduce function has no output with reduce"),
    # -- variants
    ("missing-variant", "scal", drop("variant"), f"{F}.variant", "missing"),
    ("no-variant", "scal", put("variant", value=[]), f"{F}.variant", "needs at least one variant"),
    ("duplicate-variant", "scal", lambda f: f["variant"].append(copy.deepcopy(f["variant"][0])),
     f"{F}.variant", "duplicate variant name"),
    ("variant-unknown-field", "scal", put(*V, "blocks", value=4), f"{F}.variant[0].blocks",
     "unknown field"),
    ("variant-missing-name", "scal", drop(*V, "name"), f"{F}.variant[0].name", "missing"),
    ("variant-bad-name", "scal", put(*V, "name", value="a b"), f"{F}.variant[0].name",
     "'a b' is not a usable identifier"),
    ("missing-source", "scal", drop(*V, "source"), f"{W}.source", "missing"),
    ("source-type", "scal", put(*V, "source", value=3), f"{W}.source", "expected str or list, got int"),
    ("source-list", "scal", put(*V, "source", value=["fn.cu", "fn.cu"]), f"{W}.source",
     "expected a file name or a list of distinct file names"),
    ("missing-source-file", "scal", put(*V, "source", value="other.cu"), f"{W}.source",
     "other.cu not found beside the metadata"),
    ("source-is-a-folder", "scal", put(*V, "source", value="."), f"{W}.source", "a source is a .cu file"),
    ("macros-type", "madd", put(*V, "macros", value=["BY"]), "function mymadd.variant.rows.macros",
     "expected dict, got list"),
    ("macro-bad-name", "madd", put(*V, "macros", value={"BY": [4], "2Y": [1]}),
     "function mymadd.variant.rows.macros", "'2Y' is not a usable identifier"),
    ("macro-empty", "madd", put(*V, "macros", "BY", value=[]), "function mymadd.variant.rows.macros.BY",
     "expected a non-empty list of positive ints"),
    ("macro-not-list", "madd", put(*V, "macros", "BY", value=8), "function mymadd.variant.rows.macros.BY",
     "expected a non-empty list of positive ints"),
    ("macro-zero", "madd", put(*V, "macros", "BY", value=[4, 0]), "function mymadd.variant.rows.macros.BY",
     "positive ints"),
    ("macro-bool", "madd", put(*V, "macros", "BY", value=[True]), "function mymadd.variant.rows.macros.BY",
     "positive ints"),
    ("macro-str", "madd", put(*V, "macros", "BY", value=["4"]), "function mymadd.variant.rows.macros.BY",
     "positive ints"),
    ("missing-threads", "scal", drop(*V, "threads"), f"{W}.threads", "missing"),
    ("threads-type", "scal", put(*V, "threads", value=32), f"{W}.threads", "expected list, got int"),
    ("threads-length", "scal", put(*V, "threads", value=[32]), f"{W}.threads",
     "expected [X, Y], each a positive int or a macro name"),
    ("threads-zero", "scal", put(*V, "threads", value=[0, 1]), f"{W}.threads", "expected [X, Y]"),
    ("threads-unknown-macro", "madd", put(*V, "threads", value=[32, "BZ"]),
     "function mymadd.variant.rows.threads", "expected [X, Y]"),
    ("unnested-threads-y", "scal", put(*V, "threads", value=[32, 2]), f"{W}.threads",
     "an unnested function's instance is one row of threads: [X, 1]"),
    ("unnested-threads-y-macro", "scal",
     both(put(*V, "macros", value={"BY": [1, 2]}), put(*V, "threads", value=[32, "BY"])), f"{W}.threads",
     "one row of threads"),
    ("ipb-type", "scal", put(*V, "instances_per_block", value=4), f"{W}.instances_per_block",
     "expected list, got int"),
    ("ipb-empty", "scal", put(*V, "instances_per_block", value=[]), f"{W}.instances_per_block",
     "expected a non-empty list of positive ints"),
    ("ipb-zero", "scal", put(*V, "instances_per_block", value=[0, 1]), f"{W}.instances_per_block",
     "positive ints"),
    ("ipb-on-nested", "madd", put(*V, "instances_per_block", value=[1, 2]),
     "function mymadd.variant.rows.instances_per_block", "a nested function runs one instance per block"),
    # -- locals
    ("locals-type", "gemv", put(*V, "locals", value={"name": "part"}), "function mygemv.variant.smem.locals",
     "expected list, got dict"),
    ("local-unknown-field", "gemv", put(*V, "locals", 0, "mapping", value="rows"),
     "function mygemv.variant.smem.locals[0].mapping", "unknown field"),
    ("local-missing-name", "gemv", drop(*V, "locals", 0, "name"),
     "function mygemv.variant.smem.locals[0].name", "missing"),
    ("local-bad-name", "gemv", put(*V, "locals", 0, "name", value="ty"),
     "function mygemv.variant.smem.locals[0].name", "'ty' is not a usable identifier"),
    ("local-missing-element", "gemv", drop(*V, "locals", 0, "element"),
     "function mygemv.variant.smem.locals[0].element", "missing"),
    ("local-bad-element", "gemv", put(*V, "locals", 0, "element", value="matrix"),
     "function mygemv.variant.smem.locals[0].element", "'matrix' is not scalar, subvector or tile"),
    ("local-missing-shape", "gemv", drop(*V, "locals", 0, "shape"),
     "function mygemv.variant.smem.locals[0].shape", "missing"),
    ("local-shape-count", "gemv", put(*V, "locals", 0, "shape", value=[32]),
     "function mygemv.variant.smem.locals[0].shape", "a tile has 2 sizes, each an int or a macro"),
    ("local-shape-unknown-macro", "gemv", put(*V, "locals", 0, "shape", value=["BX", 32]),
     "function mygemv.variant.smem.locals[0].shape", "each an int or a macro"),
    ("local-shape-zero", "gemv", put(*V, "locals", 0, "shape", value=["BY", 0]),
     "function mygemv.variant.smem.locals[0].shape", "each an int or a macro"),
    ("local-scalar-shape", "gemv", put(*V, "locals", 0, "element", value="scalar"),
     "function mygemv.variant.smem.locals[0].shape", "a scalar has 0 sizes"),
    ("local-is-a-param", "gemv", put(*V, "locals", 0, "name", value="x"),
     "function mygemv.variant.smem.locals[0].name", "x is also a parameter"),
    ("local-pad-type", "gemv", put(*V, "locals", 0, "pad", value="1"),
     "function mygemv.variant.smem.locals[0].pad", "expected int, got str"),
    # -- routines
    ("missing-routines", "scal", drop(*V, "routines"), f"{W}.routines", "missing"),
    ("routines-type", "scal", put(*V, "routines", value={}), f"{W}.routines", "expected list, got dict"),
    ("routine-unknown-field", "scal", put(*R, 1, "mapping", value="lane"), f"{W}.routines[1].mapping",
     "unknown field"),
    ("routine-missing-name", "scal", drop(*R, 1, "name"), f"{W}.routines[1].name", "missing"),
    ("routine-bad-name", "scal", put(*R, 1, "name", value="kernel"), f"{RT}.kernel.name",
     "routines are named load_<param>, compute[_<suffix>], finish_<param> or store_<param>"),
    ("routine-bad-suffix", "scal", put(*R, 1, "name", value="compute-x"), f"{RT}.compute-x.name",
     "routines are named"),
    ("load-unknown-param", "scal", put(*R, 0, "name", value="load_z"), f"{RT}.load_z.name",
     "z is not an on-chip parameter"),
    ("load-scalar-input", "scal", put(*R, 0, "name", value="load_alpha"), f"{RT}.load_alpha.name",
     "alpha is not an on-chip parameter"),
    ("load-of-output", "scal", put(*R, 0, "name", value="load_out"), f"{RT}.load_out.name",
     "load of output parameter out"),
    ("store-of-input", "scal", put(*R, 2, "name", value="store_x"), f"{RT}.store_x.name",
     "store of input parameter x"),
    ("missing-fn", "scal", drop(*R, 1, "fn"), f"{RT}.compute.fn", "missing"),
    ("bad-fn", "scal", put(*R, 1, "fn", value="scal::compute"), f"{RT}.compute.fn",
     "'scal::compute' is not a usable identifier"),
    ("missing-args", "scal", drop(*R, 1, "args"), f"{RT}.compute.args", "missing"),
    ("args-type", "scal", put(*R, 1, "args", value="x:r:lane"), f"{RT}.compute.args", "expected list, got str"),
    ("arg-not-string", "scal", put(*R, 1, "args", value=["x:r:lane", 3]), f"{RT}.compute.args",
     "expected strings, got 3"),
    ("routine-threads-length", "scal", put(*R, 1, "threads", value=[32, 1, 1]), f"{RT}.compute.threads",
     "expected [X, Y], each a positive int or a macro name"),
    ("routine-threads-unknown-macro", "scal", put(*R, 1, "threads", value=[32, "BY"]),
     f"{RT}.compute.threads", "expected [X, Y]"),
    # -- routine arguments
    ("global-view-of-scalar-input", "scal", put(*R, 1, "args", value=["x:r:lane", "out:w:lane", "&alpha"]),
     f"{RT}.compute.args", "&alpha: global view of an unknown or scalar-input parameter"),
    ("global-view-of-unknown", "scal", put(*R, 0, "args", value=["&y", "x:w:lane"]), f"{RT}.load_x.args",
     "&y: global view of an unknown or scalar-input parameter"),
    ("bare-element-name", "scal", put(*R, 1, "args", value=["x", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "x: a bare name must be a scalar input parameter"),
    ("bare-unknown-name", "scal", put(*R, 1, "args", value=["x:r:lane", "out:w:lane", "beta"]),
     f"{RT}.compute.args", "beta: a bare name must be a scalar input parameter"),
    ("bare-scalar-output", "dot", put(*R, 2, "args", value=["x:r:lane", "y:r:lane", "out"]),
     "function mydot.variant.warp.routine.compute.args", "out: a bare name must be a scalar input"),
    ("element-two-parts", "scal", put(*R, 1, "args", value=["x:r", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "x:r: expected NAME:MODE:MAPPING"),
    ("element-four-parts", "scal", put(*R, 1, "args", value=["x:r:lane:0", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "x:r:lane:0: expected NAME:MODE:MAPPING"),
    ("element-unknown-name", "scal", put(*R, 1, "args", value=["x:r:lane", "y:w:lane", "alpha"]),
     f"{RT}.compute.args", "y:w:lane: y is neither an on-chip parameter nor a local"),
    ("element-scalar-input", "scal", put(*R, 1, "args", value=["x:r:lane", "out:w:lane", "alpha:r:thread"]),
     f"{RT}.compute.args", "alpha is neither an on-chip parameter nor a local"),
    ("bad-mode", "scal", put(*R, 1, "args", value=["x:rw:lane", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "x:rw:lane: mode 'rw' is not one of r, w, acc"),
    ("unknown-mapping", "scal", put(*R, 1, "args", value=["x:r:diag", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "x:r:diag: mapping 'diag' is not one of lane, "),
    ("mapping-for-tile-on-subvector", "scal", put(*R, 1, "args", value=["x:r:rows", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "x:r:rows: mapping rows is for a tile, x is a subvector"),
    ("mapping-for-subvector-on-tile", "madd",
     put(*R, 2, "args", value=["A:r:lane", "B:r:rows", "out:w:rows"]),
     "function mymadd.variant.rows.routine.compute.args", "mapping lane is for a subvector, A is a tile"),
    ("mapping-for-scalar-on-subvector", "scal",
     put(*R, 1, "args", value=["x:r:thread", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "mapping thread is for a scalar, x is a subvector"),
    ("mapping-for-subvector-on-local-tile", "gemv",
     put(*R, 3, "args", value=["part:r:split", "out:acc:lane"]),
     "function mygemv.variant.smem.routine.compute_finish.args", "mapping split is for a subvector, part is a tile"),
    # -- routine set checks
    ("duplicate-routine", "scal", lambda f: f["variant"][0]["routines"].append(
        copy.deepcopy(f["variant"][0]["routines"][1])), f"{W}.routines", "duplicate routine name"),
    ("no-compute", "scal", lambda f: f["variant"][0]["routines"].pop(1), f"{W}.routines",
     "needs at least one compute routine"),
    ("missing-load", "scal", lambda f: f["variant"][0]["routines"].pop(0), f"{W}.routines",
     "missing routine load_x"),
    ("missing-store", "scal", lambda f: f["variant"][0]["routines"].pop(2), f"{W}.routines",
     "missing routine store_out"),
    ("missing-load-nested", "madd", lambda f: f["variant"][0]["routines"].pop(1),
     "function mymadd.variant.rows.routines", "missing routine load_B"),
    ("load-without-global", "scal", put(*R, 0, "args", value=["x:w:lane"]), f"{RT}.load_x.args",
     "a load routine takes exactly the global view &x"),
    ("load-other-global", "scal", put(*R, 0, "args", value=["&out", "x:w:lane"]), f"{RT}.load_x.args",
     "a load routine takes exactly the global view &x"),
    ("load-two-globals", "scal", put(*R, 0, "args", value=["&x", "&x", "x:w:lane"]), f"{RT}.load_x.args",
     "takes exactly the global view &x"),
    ("store-without-global", "scal", put(*R, 2, "args", value=["out:r:lane"]), f"{RT}.store_out.args",
     "a store routine takes exactly the global view &out"),
    ("load-two-elements", "scal", put(*R, 0, "args", value=["&x", "x:w:lane", "out:w:lane"]),
     f"{RT}.load_x.args", "a load routine accesses exactly the element x"),
    ("load-no-element", "scal", put(*R, 0, "args", value=["&x", "alpha"]), f"{RT}.load_x.args",
     "a load routine accesses exactly the element x"),
    ("load-other-element", "scal", put(*R, 0, "args", value=["&x", "out:w:lane"]), f"{RT}.load_x.args",
     "accesses exactly the element x"),
    ("store-other-element", "scal", put(*R, 2, "args", value=["x:r:lane", "&out"]), f"{RT}.store_out.args",
     "a store routine accesses exactly the element out"),
    ("load-reads", "scal", put(*R, 0, "args", value=["&x", "x:r:lane"]), f"{RT}.load_x.args",
     "a load routine must write x"),
    ("load-accumulates", "scal", put(*R, 0, "args", value=["&x", "x:acc:lane"]), f"{RT}.load_x.args",
     "a load writes its element (mode w)"),
    ("store-writes", "scal", put(*R, 2, "args", value=["out:w:lane", "&out"]), f"{RT}.store_out.args",
     "a store routine must read out"),
    ("store-accumulates", "dot", put(*R, 3, "args", value=["out:acc:thread", "&out"]),
     "function mydot.variant.warp.routine.store_out.args", "a store routine must read out"),
    ("compute-global-view", "scal", put(*R, 1, "args", value=["x:r:lane", "out:w:lane", "alpha", "&x"]),
     f"{RT}.compute.args", "a compute routine works on chip only (no &global views)"),
    ("compute-writes-input", "scal", put(*R, 1, "args", value=["x:w:lane", "out:w:lane", "alpha"]),
     f"{RT}.compute.args", "compute writes input x"),
    ("compute-accumulates-input", "scal", put(*R, 1, "args", value=["x:acc:lane", "out:w:lane"]),
     f"{RT}.compute.args", "compute writes input x"),
    ("reduced-output-written", "dot", put(*R, 2, "args", value=["x:r:lane", "y:r:lane", "out:w:thread"]),
     "function mydot.variant.warp.routine.compute.args",
     "reduced output out is accumulated (mode acc), not written"),
    ("map-output-accumulated", "scal", put(*R, 1, "args", value=["x:r:lane", "out:acc:lane", "alpha"]),
     f"{RT}.compute.args", "map output out is written (mode w), not accumulated"),
    ("local-read-before-written", "gemv",
     lambda f: f["variant"][0]["routines"].__setitem__(slice(2, 4), f["variant"][0]["routines"][3:1:-1]),
     "function mygemv.variant.smem.routine.compute_finish.args",
     "reads local part before any routine writes it"),
    ("local-never-written", "gemv", put(*R, 2, "args", value=["A:r:any", "x:r:any", "part:r:rows"]),
     "function mygemv.variant.smem.routine.compute_partial.args", "reads local part before any routine"),
    ("output-never-written", "scal", put(*R, 1, "args", value=["x:r:lane", "alpha"]), f"{W}.routines",
     "no compute routine writes output out"),
    ("output-only-read-by-compute", "scal", put(*R, 1, "args", value=["x:r:lane", "out:r:lane"]),
     f"{W}.routines", "no compute routine writes output out"),
    # -- variant tiles and finish routines
    ("tile-on-unnested", "scal", put(*V, "tile", value=[32, 32]), f"{W}.tile",
     "only a 2-level function's instances (and a 1-level variant on the rows of strips"),
    ("tile-unknown-macro", "wide", put(*V, "tile", value=[32, "TW"]), "function mygemtv.variant.wide.tile",
     "expected [rows, columns], each a positive int or a macro name"),
    ("tile-three-sizes", "wide", put(*V, "tile", value=[32, 32, 32]), "function mygemtv.variant.wide.tile",
     "expected [rows, columns]"),
    ("finish-of-input", "wide", put(*R, 3, "name", value="finish_x"),
     "function mygemtv.variant.wide.routine.finish_x.name", "finish of input parameter x"),
    ("finish-after-store", "wide", lambda f: f["variant"][0]["routines"].append(
        f["variant"][0]["routines"].pop(3)), "function mygemtv.variant.wide.routine.finish_out.args",
     "a finish routine comes before store_out"),
    ("finish-global-view", "wide", put(*R, 3, "args", value=["out:r:qcolpart", "part:w:any", "&out"]),
     "function mygemtv.variant.wide.routine.finish_out.args", "a finish routine works on chip only"),
    ("finish-not-reading-output", "wide", put(*R, 3, "args", value=["part:w:any"]),
     "function mygemtv.variant.wide.routine.finish_out.args", "a finish routine reads out and writes only locals"),
    ("finish-writes-output", "wide", put(*R, 3, "args", value=["out:acc:qcolpart", "part:w:any"]),
     "function mygemtv.variant.wide.routine.finish_out.args", "a finish routine reads out and writes only locals"),
    ("staged-store-writes", "wide", put(*R, 4, "args", value=["part:w:any", "&out"]),
     "function mygemtv.variant.wide.routine.store_out.args", "a store after finish routines reads out or the locals"),
    ("unstaged-store-reads-local", "wide", lambda f: (f["variant"][0]["routines"].pop(3), None)[1],
     "function mygemtv.variant.wide.routine.store_out.args", "a store routine accesses exactly the element out"),
    # -- reference
    ("reference-type", "scal", put("reference", value=2), f"{F}.reference", "expected str, got int"),
    ("reference-not-expression", "scal", put("reference", value="out = alpha * x"), f"{F}.reference",
     "not a Python expression"),
    ("reference-syntax", "scal", put("reference", value="alpha * (x"), f"{F}.reference",
     "not a Python expression"),
    ("reference-uses-output", "scal", put("reference", value="alpha * out"), f"{F}.reference",
     "uses out, which is not an input parameter"),
    ("reference-uses-unknown", "dot", put("reference", value="np.dot(x, z)"), "function mydot.reference",
     "uses z, which is not an input parameter"),
    ("reference-uses-builtin", "scal", put("reference", value="max(alpha) * x"), f"{F}.reference",
     "call Name `max` is not allowed"),
    # -- flops
    ("flops-type", "scal", put("flops", value=1), f"{F}.flops", "expected str, got int 1"),
    ("flops-syntax", "scal", put("flops", value="2 *"), f"{F}.flops", "not an expression"),
    ("flops-statement", "scal", put("flops", value="n = 2 * x"), f"{F}.flops", "not an expression"),
    ("flops-unknown-name", "scal", put("flops", value="2 * n"), f"{F}.flops",
     "uses n, which is not a parameter"),
]


@pytest.mark.parametrize("base, mutate, field, fragment",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_function_validation_error(tmp_path, base, mutate, field, fragment):
    f = BASES[base]()
    mutate(f)
    folder = make_library(tmp_path / "lib", [f])
    err = load_error(folder)
    assert_names(err, folder / FILE, field, fragment)


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_error_in_second_function_of_a_file_names_it(tmp_path):
    bad = dot_function()
    bad["params"][0]["type"] = "tensor"
    folder = make_library(tmp_path / "lib", [scal_function(), bad])
    assert_names(load_error(folder), folder / FILE, "function mydot.params.x.type", "'tensor'")
    bad["name"] = 7
    folder = make_library(tmp_path / "lib2", [scal_function(), bad])
    assert_names(load_error(folder), folder / FILE, "function[1].name", "expected str")


def test_error_in_second_variant_names_it(tmp_path):
    f = scal_function()
    second = copy.deepcopy(f["variant"][0])
    second["name"] = "block"
    second["threads"] = [64, 2]
    f["variant"].append(second)
    folder = make_library(tmp_path / "lib", [f])
    assert_names(load_error(folder), folder / FILE, "function myscal.variant.block.threads", "[X, 1]")


def test_error_in_user_folder_beside_shipped(tmp_path):
    f = scal_function()
    f["kind"] = "zip"
    folder = make_library(tmp_path / "user", [f])
    assert_names(load_error(folder, shipped=True), folder / FILE, "function myscal.kind", "'zip'")


# ------------------------------------------------------------------------------------------
# Validation gaps: inputs the loader should reject with a LibraryError but does not
# ------------------------------------------------------------------------------------------

GAPS = [
    ("function-entry-not-a-table", "function = [1]\n", "function[0]"),
    ("variant-entry-not-a-table", None, "variant"),
    ("routine-entry-not-a-table", None, "routines"),
    ("local-entry-not-a-table", None, "locals"),
    ("alias-not-a-string", None, "aliases"),
    ("routine-threads-not-a-list", None, "threads"),
]


def _gap_function(case: str) -> dict:
    f = gemv_function()
    v = f["variant"][0]
    if case == "variant-entry-not-a-table":
        f["variant"] = [1]
    elif case == "routine-entry-not-a-table":
        v["routines"].append(1)
    elif case == "local-entry-not-a-table":
        v["locals"] = [1]
    elif case == "alias-not-a-string":
        f["aliases"] = [1]
    elif case == "routine-threads-not-a-list":
        v["routines"][1]["threads"] = 32
    return f


@pytest.mark.parametrize("case, text, field", GAPS, ids=[g[0] for g in GAPS])
def test_malformed_entries_raise_library_error(tmp_path, case, text, field):
    folder = make_library(tmp_path / "lib", text if text is not None else [_gap_function(case)])
    err = load_error(folder)
    assert err.file == str(folder / FILE) and field in err.field


def test_unknown_top_level_table_in_library_toml(tmp_path):
    folder = make_library(tmp_path / "l", meta="[library]\nname = 'x'\n[element]\nsubvector = 64\n")
    assert_names(load_error(folder), folder / "library.toml", ".element", "unknown field")


def test_second_library_name_is_validated(tmp_path):
    first = make_library(tmp_path / "a")
    second = make_library(tmp_path / "b", [dot_function()], meta="[library]\nname = 5\n")
    assert_names(load_error(first, second), second / "library.toml", "library.name", "expected str")


def test_boolean_thread_count_is_rejected(tmp_path):
    f = scal_function()
    f["variant"][0]["threads"] = [32, True]
    folder = make_library(tmp_path / "lib", [f])
    assert_names(load_error(folder), folder / FILE, "function myscal.variant.warp.threads", "expected [X, Y]")


def test_negative_local_pad_is_rejected(tmp_path):
    f = gemv_function()
    f["variant"][0]["locals"][0]["pad"] = -1
    folder = make_library(tmp_path / "lib", [f])
    assert_names(load_error(folder), folder / FILE, "function mygemv.variant.smem.locals[0].pad",
                 "non-negative")


def test_duplicate_local_names_are_rejected(tmp_path):
    f = gemv_function()
    v = f["variant"][0]
    v["locals"].append(copy.deepcopy(v["locals"][0]))
    folder = make_library(tmp_path / "lib", [f])
    err = load_error(folder)
    assert err.file == str(folder / FILE) and "locals" in err.field


def test_a_library_loaded_again_unchanged_is_the_same_object(tmp_path):
    """Loads are memoised on the files' names and contents: unchanged, the same Library; a file
    edited (even to the same size), a new load that sees the edit; a broken file, an error every
    time (errors are not remembered)."""
    folder = make_library(tmp_path / "mylib", meta=None)
    first = load_library(folder, shipped=False)
    assert load_library(folder, shipped=False) is first
    toml = next(p for p in Path(folder).glob("*.toml"))
    text = toml.read_text()
    toml.write_text(text.replace('name = "', 'name = "Z', 1))      # one byte longer: renamed
    renamed = load_library(folder, shipped=False)
    assert renamed is not first and renamed.digest != first.digest
    assert renamed.functions[0].name == "Z" + first.functions[0].name
    toml.write_text(text.replace('name = "', 'nome = "', 1))       # same size, now invalid
    for _ in range(2):
        with pytest.raises(LibraryError):
            load_library(folder, shipped=False)


@pytest.mark.parametrize("files", [{}, {"library.toml": '[library]\nname = "mine"\n'},
                                   {"kernels.cu": "// routines without metadata\n"},
                                   {"empty.toml": "function = []\n"}])
def test_folder_defining_no_functions(tmp_path, files):
    """A folder given by mistake (no function tables) is an error naming it, not a library whose
    only effect is a new digest that no calibration matches."""
    folder = tmp_path / "notalib"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    err = load_error(folder, shipped=True)
    assert_names(err, folder, "folder", "defines no functions")


@pytest.mark.parametrize("old, new, match", [
    ('fallback = "strip"', 'fallback = "stripe"', "'stripe' is not another variant of gemv"),
    ('fallback = "strip"', 'fallback = "band"', "'band' is not another variant of gemv"),
    ('fallback = "strip"', 'fallback = 3', "fallback: expected str"),
    ('"x:w:svec"], overlap = true', '"x:w:svec"], overlap = "yes"', "overlap: expected bool"),
    ('"&out"] },\n]\n\n# rows longer', '"&out"], overlap = true },\n]\n\n# rows longer',
     "only a load overlaps the variant's other loads"),
])
def test_band_fields_are_checked(tmp_path, old, new, match):
    """`fallback` names another variant of the function; `overlap` is a load's (both read from
    the shipped gemv's band variant, changed)."""
    root = tmp_path / "blas"
    shutil.copytree(SHIPPED, root)
    text = (root / "blas2.toml").read_text()
    assert old in text
    (root / "blas2.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(LibraryError, match=match):
        load_library(root, shipped=False)


def test_band_variant_as_loaded():
    lib = load_library()
    gemvs = [f for f in lib.functions if f.name == "gemv"]
    assert len(gemvs) == 3
    for fn in gemvs:
        band = next(v for v in fn.variants if v.name == "band")
        assert band.fallback == "strip" and band.whole == () and band.tile == ("R", "NC")
        assert [r.name for r in band.routines if r.overlap] == ["load_x"]
    assert not any(r.overlap for f in lib.functions for v in f.variants if v.name != "band" for r in v.routines)
