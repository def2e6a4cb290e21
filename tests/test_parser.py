"""The script front end: Listing 1, the examples, and every ScriptError with its position (CPU)."""
from __future__ import annotations

import pytest

from kfuse.errors import KfuseError, ScriptError
from kfuse.frontend import parse_script
from kfuse.ir.program import ScalarArg

from conftest import EXAMPLES, ROOT

FILE = "t.kf"


def parse(src: str, lib):
    return parse_script(src, lib, FILE)


def values(prog, name):
    return [v for v in prog.values if v.name == name]


def value(prog, name):
    (v,) = values(prog, name)
    return v


def script_error(src: str, lib) -> ScriptError:
    with pytest.raises(ScriptError) as info:
        parse_script(src, lib, FILE)
    return info.value


def assert_error(err: ScriptError, src: str, line: int, column: int, message: str) -> None:
    """Type, position attributes, the file:line:column header, the offending line and the caret."""
    assert isinstance(err, ScriptError) and isinstance(err, KfuseError)
    assert (err.line, err.column, err.file) == (line, column, FILE)
    assert err.bare == message
    text = str(err)
    lines = src.splitlines()
    source_line = lines[line - 1] if line <= len(lines) else ""
    assert text.splitlines() == [
        f"{FILE}:{line}:{column}: error: {message}",
        f"    {source_line.rstrip()}",
        "    " + " " * (column - 1) + "^",
    ]


# ------------------------------------------------------------------------------------------
# Scripts that parse
# ------------------------------------------------------------------------------------------

def test_listing1_bicgk(lib):
    path = ROOT / "examples" / "bicgk.kf"
    prog = parse_script(path.read_text(), lib, str(path))
    assert prog.name == "bicgk" and prog.file == str(path)
    assert prog.library_digest == lib.digest
    assert len(prog.calls) == 2
    assert [v.name for v in prog.inputs] == ["A", "p", "r"]
    assert [v.name for v in prog.outputs] == ["q", "s"]
    A, p, r, q, s = (value(prog, n) for n in "Aprqs")
    assert (A.type, p.type, r.type, q.type, s.type) == ("matrix", "vector", "vector", "vector", "vector")
    assert A.is_input and p.is_input and r.is_input and not q.is_input and not s.is_input
    rows, cols = A.dims
    assert rows != cols
    assert p.dims == (cols,) and r.dims == (rows,)        # gemv(A, p): p along A's columns
    assert q.dims == (rows,) and s.dims == (cols,)        # gemtv(A, r): r along A's rows
    assert prog.shape_names(A) == ("A.rows", "A.cols")
    assert len(prog.dims) == 2
    gemv, gemtv = prog.calls
    assert gemv.function is lib.overloads("gemv")[0] and gemtv.function is lib.overloads("gemtv")[0]
    assert gemv.args == (A, p) and gemv.outputs == (q,) and gemv.line == 7
    assert gemtv.args == (A, r) and gemtv.outputs == (s,) and gemtv.line == 8
    assert [c.text() for c in prog.calls] == ["q = gemv(A, p)", "s = gemtv(A, r)"]
    assert gemv.axes == (rows, cols) and gemtv.axes == (rows, cols)
    assert prog.producer(q) is gemv and prog.consumers(A) == (gemv, gemtv)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_parses(lib, path):
    prog = parse_script(path.read_text(), lib, str(path))
    assert prog.name == path.stem
    assert prog.calls and prog.outputs and prog.inputs
    assert all(v.is_input for v in prog.inputs)
    assert all(not v.is_input for v in prog.outputs)
    for v in prog.values:
        assert len(v.dims) == {"scalar": 0, "vector": 1, "matrix": 2}[v.type]
        assert all(0 <= d < len(prog.dims) for d in v.dims)


def test_examples_with_declared_sizes_share_one_dimension(lib):
    for stem in ("atax", "gemver", "gesummv", "sgemvt", "madd"):
        prog = parse_script((ROOT / "examples" / f"{stem}.kf").read_text(), lib, f"{stem}.kf")
        assert [d.name for d in prog.dims] == ["n"], stem


def test_default_program_name(lib):
    assert parse_script("vector x, y; input x; y = scal(2, x); return y;", lib).name == "script"
    assert parse_script("vector x, y; input x; y = scal(2, x); return y;", lib, "my-file.kf").name == "my_file"
    assert parse_script("vector x, y; input x; y = scal(2, x); return y;", lib, name="a b").name == "a_b"


def test_literals_and_negated_scalars(lib):
    src = ("scalar a, b;\nmatrix A;\nvector v, w, y, z, u, t, s;\ninput a, b, A, v, w, y, z;\n"
           "u = axpy(-a, v, w);\nt = gemtv(b, A, y, 1, z);\ns = axpby(-2.5, u, 1e3, t);\nreturn s;\n")
    prog = parse(src, lib)
    axpy, gemtv, axpby = prog.calls
    a, b = value(prog, "a"), value(prog, "b")
    assert axpy.args[0] == ScalarArg(a, None, True)
    assert axpy.args[0].text() == "-a"
    assert axpy.args[1:] == (value(prog, "v"), value(prog, "w"))
    assert gemtv.function is lib.overloads("gemtv")[2]
    assert gemtv.args[0] == ScalarArg(b) and gemtv.args[3] == ScalarArg(None, 1.0)
    assert axpby.args[0] == ScalarArg(None, -2.5) and axpby.args[2] == ScalarArg(None, 1000.0)
    assert axpby.text() == "s = axpby(-2.5, u, 1000.0, t)"
    assert prog.consumers(a) == (axpy,)


def test_reassignment_creates_new_values(lib):
    src = "vector x, t, y;\ninput x;\nt = scal(2, x);\nt = scal(3, t);\nt = vadd(t, x);\ny = vadd(t, t);\nreturn y, t;\n"
    prog = parse(src, lib)
    ts = values(prog, "t")
    assert [v.label for v in ts] == ["t", "t_2", "t_3"]
    assert len({v.id for v in ts}) == 3
    c0, c1, c2, c3 = prog.calls
    assert c1.args[1] is ts[0] or c1.args[1] == ts[0]
    assert c1.outputs == (ts[1],) and c2.args == (ts[1], value(prog, "x")) and c2.outputs == (ts[2],)
    assert c3.args == (ts[2], ts[2])
    assert [v.label for v in prog.outputs] == ["y", "t_3"]
    assert ts[0].dims == ts[1].dims == ts[2].dims == value(prog, "x").dims


def test_value_labels_are_unique_in_examples(lib):
    for path in EXAMPLES:
        prog = parse_script(path.read_text(), lib, str(path))
        labels = [v.label for v in prog.values]
        assert len(labels) == len(set(labels)), path.stem


def test_value_labels_are_unique_with_suffix_like_names(lib):
    src = "vector x, t, t_2;\ninput x;\nt = scal(2, x);\nt = scal(3, t);\nt_2 = scal(4, t);\nreturn t, t_2;\n"
    labels = [v.label for v in parse(src, lib).values]
    assert len(labels) == len(set(labels)), labels


def test_declared_dims_unify(lib):
    src = "vector x[n], y[n], z[m], w;\ninput x, y, z;\nw = vadd(x, y);\nreturn w;\n"
    prog = parse(src, lib)
    x, y, z, w = (value(prog, n) for n in "xyzw")
    assert x.dims == y.dims == w.dims
    assert z.dims != x.dims
    assert prog.shape_names(w) == ("n",) and prog.shape_names(z) == ("m",)
    assert {d.name for d in prog.dims} == {"n", "m"}


def test_declared_dims_across_matrix_and_vectors(lib):
    src = "matrix A[m, n];\nvector x, y;\ninput A, x;\ny = gemv(A, x);\nreturn y;\n"
    prog = parse(src, lib)
    assert prog.shape_names(value(prog, "x")) == ("n",)
    assert prog.shape_names(value(prog, "y")) == ("m",)


def test_a_declaration_never_used_adds_no_size(lib):
    """Nothing can give the size of a value the script never uses: it is not one of the program's
    sizes (binding would ask for it and fail, "sizes must be positive integers: v.len")."""
    prog = parse("matrix A;\nvector x, y, v, u[m];\ninput A, x;\ny = gemv(A, x);\nreturn y;\n", lib)
    assert [d.name for d in prog.dims] == ["A.rows", "A.cols"]


def test_a_literal_size_beyond_any_memory_is_refused(lib):
    with pytest.raises(ScriptError, match="the size 99999999999999999999 is too large"):
        parse("vector x[99999999999999999999], y;\ninput x;\ny = scal(2.0, x);\nreturn y;\n", lib)
    assert parse("vector x[281474976710656], y;\ninput x;\ny = scal(2.0, x);\nreturn y;\n", lib).dims[0].literal == 2 ** 48


def test_a_division_by_a_literal_zero_is_refused(lib):
    src = "scalar a, b;\nvector x, y;\ninput a, x;\nb = a / {};\ny = scal(b, x);\nreturn y;\n"
    with pytest.raises(ScriptError, match=r"4:9: error: division by zero"):
        parse(src.format("0.0"), lib)
    with pytest.raises(ScriptError, match="division by zero"):
        parse(src.format("-0"), lib)
    parse(src.format("(a - a)"), lib)       # known only at run time: IEEE arithmetic, as written


def test_literal_sizes(lib):
    src = "vector x[64], y, z[64];\ninput x, y;\nz = vadd(x, y);\nreturn z;\n"
    prog = parse(src, lib)
    (dim,) = prog.dims
    assert dim.literal == 64
    assert prog.dim(value(prog, "y").dims[0]).literal == 64


def test_named_and_literal_sizes_unify(lib):
    prog = parse("vector x[n], y[8], z;\ninput x, y;\nz = vadd(x, y);\nreturn z;\n", lib)
    (dim,) = prog.dims
    assert dim.name == "n" and dim.literal == 8


def test_comments_and_whitespace_are_ignored(lib):
    src = ("# a comment line\n\n  vector x, y;   # trailing comment\n\tinput x;\n"
           "y = scal(  2 ,x ) ; # another\n# return z;\nreturn y;   # done\n# end\n")
    prog = parse(src, lib)
    assert [c.text() for c in prog.calls] == ["y = scal(2.0, x)"]
    assert prog.calls[0].line == 5


def test_comment_lines_count_for_positions(lib):
    src = "# c1\n# c2\nvector x, y;\ninput x;\ny = scal(2, zz);\nreturn y;\n"
    err = script_error(src, lib)
    assert (err.line, err.column) == (5, 13)


def test_crlf_line_endings(lib):
    src = "vector x, y;\r\ninput x;\r\ny = scal(2, q);\r\nreturn y;\r\n"
    err = script_error(src, lib)
    assert (err.line, err.column) == (3, 13)
    assert str(err).splitlines()[1] == "    y = scal(2, q);"


def test_type_aliases(lib):
    src = "TILE32x32 A;\ntile32x32 B;\nsubvector32 x;\nvector y;\ninput A, B, x;\ny = gemv(A, x);\nreturn y;\n"
    prog = parse(src, lib)
    assert value(prog, "A").type == "matrix" and value(prog, "B").type == "matrix"
    assert value(prog, "x").type == "vector"


# ------------------------------------------------------------------------------------------
# ScriptErrors: type, line, column, header, source line and caret
# ------------------------------------------------------------------------------------------

GEMV_SIGS = ("vector out = gemv(matrix A, vector x); vector out = gemv(scalar alpha, matrix A, vector x); "
             "vector out = gemv(scalar alpha, matrix A, vector x, scalar beta, vector y)")

ERRORS = [
    # id, source, line, column, exact message
    ("missing-semicolon", "vector x, y\ninput x;\ny = scal(2, x);\nreturn y;\n", 2, 1,
     "expected ';', found 'input'"),
    ("missing-semicolon-after-call", "vector x, y;\ninput x;\ny = scal(2, x)\nreturn y;\n", 4, 1,
     "expected ';', found 'return'"),
    ("unexpected-character", "vector x, y;\ninput x;\ny = scal(2, @x);\nreturn y;\n", 3, 13,
     "unexpected character '@'"),
    ("unexpected-character-first-line", "vector x, y; $\n", 1, 14, "unexpected character '$'"),
    ("missing-equals", "vector x, y;\ninput x;\ny scal(2, x);\nreturn y;\n", 3, 3, "expected '=', found 'scal'"),
    ("statement-starts-badly", "vector x, y;\ninput x;\n; y = scal(2, x);\nreturn y;\n", 3, 1,
     "expected a statement, found ';'"),
    ("keyword-as-declared-name", "vector input;\n", 1, 8, "expected a name to declare, found 'input'"),
    ("keyword-as-argument", "vector x, y;\ninput x;\ny = scal(2, input);\nreturn y;\n", 3, 13,
     "expected an argument, found 'input'"),
    ("function-name-missing", "vector x, y;\ninput x;\ny = (2, x);\nreturn y;\n", 3, 7,
     "expected ')', found ','"),
    ("unknown-function", "vector x, y;\nmatrix A;\ninput A, x;\ny = gemvv(A, x);\nreturn y;\n", 4, 5,
     "unknown function gemvv (did you mean gemv?)"),
    ("unknown-function-no-hint", "vector x, y;\ninput x;\ny = zzzz(x);\nreturn y;\n", 3, 5,
     "unknown function zzzz"),
    ("wrong-argument-count", "vector x, y;\nmatrix A;\ninput A, x;\ny = gemv(A, x, x, x);\nreturn y;\n", 4, 5,
     f"gemv takes 2 or 3 or 5 arguments, 4 given ({GEMV_SIGS})"),
    ("wrong-argument-count-alias", "vector x, y;\ninput x;\ny = sscal(x);\nreturn y;\n", 3, 5,
     "sscal takes 2 arguments, 1 given (vector out = scal(scalar alpha, vector x))"),
    ("vector-where-matrix", "vector x, y;\nmatrix A;\ninput A, x;\ny = gemv(x, x);\nreturn y;\n", 4, 10,
     "argument 1 (A) of gemv must be a matrix, x is a vector"),
    ("vector-where-scalar", "vector x, y;\ninput x;\ny = scal(x, x);\nreturn y;\n", 3, 10,
     "argument 1 (alpha) of scal must be a scalar, x is a vector"),
    ("number-where-vector", "vector x, y;\ninput x;\ny = scal(2, 3);\nreturn y;\n", 3, 13,
     "argument 2 (x) of scal must be a vector, got the number 3"),
    ("use-before-assignment", "vector x, t, y;\ninput x;\ny = vadd(x, t);\nreturn y;\n", 3, 13,
     "t is used before it is assigned"),
    ("undeclared-name", "vector x, y;\ninput x;\ny = scal(2, xx);\nreturn y;\n", 3, 13,
     "xx is not declared (did you mean x?)"),
    ("undeclared-target", "vector x, y;\ninput x;\nyy = scal(2, x);\nreturn y;\n", 3, 1,
     "yy is not declared (did you mean y?)"),
    ("undeclared-input", "vector x, y;\ninput x, q;\ny = scal(2, x);\nreturn y;\n", 2, 10, "q is not declared"),
    ("doubly-declared", "vector x, y;\nscalar x;\ninput x;\ny = scal(2, x);\nreturn y;\n", 2, 8,
     "x is already declared (line 1)"),
    ("doubly-declared-same-line", "vector x, y, x;\n", 1, 14, "x is already declared (line 1)"),
    ("input-twice", "vector x, y;\ninput x, x;\ny = scal(2, x);\nreturn y;\n", 2, 10, "x is already an input"),
    ("input-after-assignment", "vector a, x;\ninput a;\nx = scal(2, a);\ninput x;\nreturn x;\n", 4, 7,
     "x is assigned before it is declared an input"),
    ("returned-never-assigned", "vector x, y, z;\ninput x;\ny = scal(2, x);\nreturn y, z;\n", 4, 11,
     "z is returned but never assigned"),
    ("returning-an-input", "vector x, y;\ninput x;\ny = scal(2, x);\nreturn x;\n", 4, 8,
     "x is an input; return values the script computes"),
    ("returned-twice", "vector x, y;\ninput x;\ny = scal(2, x);\nreturn y, y;\n", 4, 11, "y is returned twice"),
    ("returning-undeclared", "vector x, y;\ninput x;\ny = scal(2, x);\nreturn w;\n", 4, 8, "w is not declared"),
    ("missing-return", "vector x, y;\ninput x;\ny = scal(2, x);\n", 3, 16, "the script has no return statement"),
    ("missing-return-no-newline", "vector x, y;\ninput x;\ny = scal(2, x);", 3, 16,
     "the script has no return statement"),
    ("statement-after-return", "vector x, y;\ninput x;\ny = scal(2, x);\nreturn y;\ny = scal(3, x);\n", 5, 1,
     "statement after return"),
    ("conflicting-declared-sizes", "vector a[n], b[m], c;\ninput a, b;\nc = vadd(a, b);\nreturn c;\n", 3, 13,
     "argument 2 (y) of vadd b: size does not match the other arguments: "
     "declared sizes n and m must be the same dimension"),
    ("conflicting-literal-sizes", "vector a[3], b[4], c;\ninput a, b;\nc = vadd(a, b);\nreturn c;\n", 3, 13,
     "argument 2 (y) of vadd b: size does not match the other arguments: sizes 3 and 4 differ"),
    ("conflicting-result-size", "vector x[n], y[m];\ninput x;\ny = scal(2, x);\nreturn y;\n", 3, 1,
     "y: size does not match the result of scal: declared sizes n and m must be the same dimension"),
    ("conflicting-matrix-sizes", "matrix A[m, n];\nvector x[m], y;\ninput A, x;\ny = gemv(A, x);\nreturn y;\n",
     4, 13, "argument 2 (x) of gemv x: size does not match the other arguments: "
     "declared sizes n and m must be the same dimension"),
    ("wrong-number-of-sizes", "vector x[n, m], y;\ninput x;\ny = scal(2, x);\nreturn y;\n", 1, 9,
     "a vector has 1 sizes, 2 given"),
    ("matrix-with-one-size", "matrix A[n];\n", 1, 9, "a matrix has 2 sizes, 1 given"),
    ("scalar-with-a-size", "vector x;\nscalar a[n];\n", 2, 9, "a scalar has 0 sizes, 1 given"),
    ("zero-size", "vector x[0], y;\n", 1, 10, "a size is a name or a positive integer"),
    ("empty-size-list", "vector x[], y;\n", 1, 10, "a size is a name or a positive integer"),
    ("fractional-size", "vector x[2.5];\n", 1, 10, "a size is a name or a positive integer"),
    ("indexing-a-vector", "vector x, y, z;\ninput x, y;\nz = vadd(x[1, None], y);\nreturn z;\n", 3, 12,
     "a vector is indexed only to broadcast it: v[:, None] or v[None, :]"),
    ("subvector64", "subvector64 x, y;\ninput x;\ny = scal(2, x);\nreturn y;\n", 1, 1,
     "subvector64: this library's vectors are made of 32-entry subvectors"),
    ("tile64", "vector x;\nTILE64x64 A;\n", 2, 1, "TILE64x64: this library's matrices are made of 32x32 tiles"),
    ("scalar-result-to-vector", "vector x, y, r;\ninput x, y;\nr = dot(x, y);\nreturn r;\n", 3, 1,
     "dot returns a scalar as out, r is a vector"),
    ("vector-result-to-scalar", "vector x;\nscalar s;\ninput x;\ns = scal(2, x);\nreturn s;\n", 4, 1,
     "scal returns a vector as out, s is a scalar"),
    ("too-many-targets", "vector x, y, z;\ninput x;\ny, z = scal(2, x);\nreturn y;\n", 3, 1,
     "scal returns 1 value(s), 2 assigned"),
]


@pytest.mark.parametrize("src, line, column, message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_script_error(lib, src, line, column, message):
    assert_error(script_error(src, lib), src, line, column, message)


def test_error_ids_are_unique():
    ids = [e[0] for e in ERRORS]
    assert len(ids) == len(set(ids))


def test_error_names_the_given_file(lib):
    src = "vector x, y;\ninput x;\ny = scal(2, x)\n"
    with pytest.raises(ScriptError) as info:
        parse_script(src, lib, "scripts/mine.kf")
    assert str(info.value).startswith("scripts/mine.kf:3:15: error: expected ';', found 'end of script'")
    assert info.value.file == "scripts/mine.kf"


def test_unknown_alias_suggests_an_alias(lib):
    err = script_error("vector x, y;\ninput x;\ny = sscall(2, x);\nreturn y;\n", lib)
    assert err.bare == "unknown function sscall (did you mean sscal?)"


def test_caret_under_a_later_token(lib):
    src = "scalar a;\nvector x, y;\ninput a, x;\ny = axpy(a, x,    zz);\nreturn y;\n"
    err = script_error(src, lib)
    assert (err.line, err.column) == (4, 19)
    assert str(err).splitlines()[-1] == "    " + " " * 18 + "^"
    assert str(err).splitlines()[-2][4 + 18:].startswith("zz")


@pytest.mark.parametrize("call, match", [
    (lambda k: k.compile(123), "a script is a path or the text of a script, got int 123"),
    (lambda k: k.compile(None), "a script is a path or the text of a script, got NoneType"),
    (lambda k: k.compile("  \n"), "the script is empty"),
    (lambda k: k.compile("int8"), "no such script file"),
    (lambda k: k.compile(EXAMPLES[0], dtype="int8"), "dtype must be one of float32, float64"),
    (lambda k: k.compile(EXAMPLES[0], library=123), "library is a folder, a list of folders or a loaded library"),
    (lambda k: k.compile(EXAMPLES[0], calibration=3), "calibration is True, False, a calibration file or a model"),
    (lambda k: k.compile(EXAMPLES[0]).for_sizes({d.id: 0 for d in k.compile(EXAMPLES[0]).program.dims}),
     "sizes must be positive integers"),
    (lambda k: k.jit(123), "@kfuse.jit decorates a Python function, got int 123"),
    (lambda k: k.compile(EXAMPLES[0]).for_sizes("n"), "sizes are a dict of dimension id -> size, got str"),
    (lambda k: k.compile(ROOT / "examples" / "gemver.kf").for_sizes({"n": 64}),
     "sizes must be positive integers, by dimension id: n \\(id 0\\) \\(given 'n'\\)"),
    (lambda k: k.compile(ROOT / "examples" / "gemver.kf").for_device_scalars(["nope"]),
     "device_scalars: 'nope' is not a scalar input of the script \\(its scalar inputs: a, b\\)"),
    (lambda k: k.compile(ROOT / "examples" / "gemver.kf").for_device_scalars("ab"),
     "device_scalars: 'ab' is not a scalar input"),
])
def test_api_misuse_is_a_kfuse_error(call, match):
    """Arguments of kfuse.compile, CompiledScript.for_sizes and kfuse.jit of the wrong kind are
    KfuseErrors saying what is expected (before: TypeError, AttributeError or ZeroDivisionError
    from inside kfuse; an empty string read as the folder '.')."""
    import kfuse
    with pytest.raises(KfuseError, match=match):
        call(kfuse)


def test_device_scalars_as_one_name():
    """for_device_scalars("ab") was read as the letters a and b (gemver's two scalars, both then
    read by address) and a wrong name was a ValueError; a str is one name, as for compile."""
    import kfuse
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf")
    assert prog.for_device_scalars("a").program.device_scalars() == {"a"}
    assert prog.for_device_scalars(("a", "b")).program.device_scalars() == {"a", "b"}
    assert prog.for_device_scalars(()) is prog
