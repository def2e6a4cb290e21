"""The torch.compile operator's host side (compiler/torchop.py), without torch: the form of a jitted
function's results (which are the operator's, which pass an argument through), found from a trace
at stand-in sizes; the results' shapes by the program's size rules; arguments bound by name as
Dynamo traces them.  With torch and a GPU: tests/test_gpu_torch_compile.py."""
from __future__ import annotations

import numpy as np
import pytest

import kfuse
from kfuse.errors import KfuseError, LaunchError
from kfuse.runtime.binding import result_shapes

from kfuse.compiler import torchop


def _step(A, x, r, rr):
    q = A @ x
    a = rr / (x @ q)
    r = r - a * q
    return A, r, r @ r, kfuse.sqrt(rr), r


def test_the_form_passes_arguments_through_and_returns_each_value_once():
    fn = kfuse.jit(_step)
    form = torchop.form(fn.op_key, "tttt", ((2, "float64"), (1, "float64"), (1, "float64"), (0, "float64")))
    assert form.single is False
    assert form.items[0] == ("arg", 0)                          # A, passed through: not the operator's
    assert form.items[1] == form.items[4] == ("op", 0)          # r, returned twice: one result
    assert form.computed[0][0] == "out" and [w for w, _ in form.computed[1:]] == ["out", "expr"]
    assert len(form.computed) == 3


def test_the_form_does_not_depend_on_the_sizes():
    fn = kfuse.jit(_step)
    at = [fn.lowered(np.zeros((n, n)), np.zeros(n), np.zeros(n), np.zeros(()))[0].returns for n in (3, 1000)]
    assert [r[0] for r in at[0]] == [r[0] for r in at[1]]
    assert torchop.form_of(at[0], False) == torchop.form_of(at[1], False)


def test_one_value_is_single():
    fn = kfuse.jit(lambda x, y: x + 2.0 * y)
    form = torchop.form(fn.op_key, "tt", ((1, "float32"), (1, "float32")))
    assert form.single and form.items == (("op", 0),) and form.computed == (("out", 0),)


def test_result_shapes_follow_the_size_rules():
    fn = kfuse.jit(lambda A, x, g: (A.T @ x, kfuse.lib.lap7(g), x @ x))
    lowered, _ = fn.lowered(np.zeros((7, 3)), np.zeros(7), np.zeros((4, 5, 6)))
    shapes = {name: s for (name, k), s in zip(lowered.inputs, [(7, 3), (7,), (4, 5, 6)])}
    got = result_shapes(lowered.program, shapes)
    assert [got[n] for n in lowered.outputs] == [(3,), (4, 5, 6), ()]
    with pytest.raises(LaunchError, match="length is 8"):
        result_shapes(lowered.program, dict(shapes, **{lowered.inputs[1][0]: (8,)}))


def test_arguments_bind_by_name_and_default_without_inspect():
    def f(a, x, y=None):
        return a * x + y
    fn = kfuse.jit(f)
    x, y = object(), object()
    assert fn._bound((2.0, x), {"y": y}) == (2.0, x, y)
    assert fn._bound((2.0,), {"x": x, "y": y}) == (2.0, x, y)
    assert fn._bound((2.0, x), {}) == (2.0, x, None)
    with pytest.raises(KfuseError, match="missing a required argument: 'x'"):
        fn._bound((2.0,), {})
    with pytest.raises(KfuseError, match="unexpected keyword argument 'z'"):
        fn._bound((2.0, x), {"z": y})
    with pytest.raises(KfuseError, match="multiple values for argument 'a'"):
        fn._bound((2.0,), {"a": 1.0, "x": x})
    with pytest.raises(KfuseError, match="too many positional arguments"):
        fn._bound((2.0, x, y, y), {})


def test_a_positional_only_parameter_is_not_taken_by_keyword():
    def f(a, /, x):
        return a * x
    fn = kfuse.jit(f)
    x = object()
    assert fn._bound((2.0,), {"x": x}) == (2.0, x)
    with pytest.raises(KfuseError, match="unexpected keyword argument 'a'"):
        fn._bound((), {"a": 2.0, "x": x})


def test_a_function_gone_is_a_clear_error():
    with pytest.raises(KfuseError, match="no longer exists"):
        torchop.form(10**9, "t", ((1, "float32"),))


def test_a_scripts_form_is_its_return_statement():
    prog = kfuse.compile("vector x, y, z; scalar s; input x, y; z = waxpby(2.0, x, -1.0, y); s = dot(z, z);"
                         " return z, sqrt(s), s;", dtype="float64")
    form = torchop.form(prog.calls.op_key, "tt", ((1, "float64"), (1, "float64")))
    assert form.single is False and form.items == (("op", 0), ("op", 1), ("op", 2))
    assert [w for w, _ in form.computed] == ["out", "expr", "out"]
    one = kfuse.compile("vector x, y; input x; y = scal(2.0, x); return y;")
    assert torchop.form(one.calls.op_key, "t", ((1, "float32"),)).single


def test_a_torch_that_refuses_the_operator_leaves_kfuse_working(monkeypatch, caplog):
    """Registration fails (a torch whose Library raises): a warning, once; compiles and jitted
    functions go on (their calls inside torch.compile then break its graph, as before)."""
    import logging
    import sys
    import types

    def refuse(*a, **k):
        raise RuntimeError("no custom operators here")
    fake = types.SimpleNamespace(library=types.SimpleNamespace(Library=refuse, register_fake=refuse),
                                 compiler=types.SimpleNamespace(is_compiling=lambda: False), Tensor=type("T", (), {}))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(torchop, "_state", {})
    with caplog.at_level(logging.WARNING, logger="kfuse"):
        assert torchop.register() is False and torchop.register() is False
        prog = kfuse.compile("vector x, y; input x; y = scal(2.0, x); return y;")
        kfuse.jit(lambda x: 2.0 * x).trace(np.zeros(5, np.float32))
    assert caplog.text.count("could not be registered") == 1 and prog.kernels
    assert torchop.compiling() is False
