"""A jitted function inside ``torch.compile``: the torch custom operator ``kfuse::call``.

Traced by TorchDynamo, a jitted call would be three graph breaks (kfuse's call path is no torch
code) and ``fullgraph=True`` would fail.  Under ``torch.compile`` a call instead becomes one node
of the graph: ``torch.ops.kfuse.call(function, kinds, tensors, numbers)``, a custom operator
(``torch.library.custom_op``) registered once per process when torch is imported:

* ``function`` numbers the jitted function (``JitFunction``'s ``op_key``, looked up in a weak
  table), ``kinds`` says per argument whether it is a tensor (``t``) or a number (``n``), and the
  tensors and numbers come in their own lists (a custom operator's schema is typed);
* its implementation is the jitted function's own call, with each result in a tensor of its own
  (``out=``: a custom operator's results may not alias each other or an input);
* its fake implementation gives the results' shapes from the program's size rules
  (``runtime/binding.result_shapes``), so the graph is traced without running anything;
* results the function passes through unchanged (a loop state's matrix) are not the operator's:
  the Python around it (which Dynamo traces) returns the argument itself.  Which results those
  are is the form of the function at those kinds, ranks and dtypes (``form``), computed when Dynamo
  traces (``torch.compiler.assume_constant_result``) from a trace at stand-in sizes: a traced
  function's structure does not depend on its sizes (``.shape`` is refused while tracing).

A tensor that requires grad is refused by kfuse's call path (kfuse computes no gradients); in a
compiled graph torch itself refuses the backward through ``kfuse::call``, which has none.
"""
from __future__ import annotations

import itertools
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import KfuseError

OP = "kfuse::call"
SCHEMA = "(int function, str kinds, Tensor[] tensors, float[] numbers) -> Tensor[]"
_functions: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_numbers = itertools.count()
_state: dict[str, Any] = {}         # "op": the registered operator, "form": ``form`` as Dynamo calls it
_traces: dict[tuple, Any] = {}     # (function, kinds, signature) -> its stand-in trace (``_stand_in_trace``)
_STAND_IN = 4                       # every size of a stand-in argument (a traced function's form is size-free)


def compiling() -> bool:
    """Is TorchDynamo tracing the caller?  False until ``register`` puts torch's own
    ``torch.compiler.is_compiling`` in this name's place (one call on every jitted call's path)."""
    return False


def enrol(fn) -> int:
    """A number for a jitted function, by which the operator finds it (a weak reference)."""
    key = next(_numbers)
    _functions[key] = fn
    return key


def register() -> bool:
    """Register ``kfuse::call`` where torch is imported (once; kfuse never imports torch itself).
    Called when a function is decorated, when a call sees a torch tensor and when kfuse is
    imported; returns whether the operator exists."""
    if "op" in _state:
        return True
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        return False

    @torch.library.custom_op(OP, mutates_args=(), schema=SCHEMA)
    def call(function, kinds, tensors, numbers):
        return run(function, kinds, tensors, numbers)

    @call.register_fake
    def _(function, kinds, tensors, numbers):
        return fake(function, kinds, tensors, numbers)

    _state["form"] = torch.compiler.assume_constant_result(form)
    _state["op"] = torch.ops.kfuse.call
    globals()["compiling"] = torch.compiler.is_compiling
    return True


@dataclass(frozen=True)
class Form:
    """How a jitted function's results come out of the operator at one signature: ``computed``,
    the operator's results in order (("out", k): program output k; ("expr", i): the i-th returned
    scalar arithmetic), and ``items``, each returned value as ("op", j), the operator's result j,
    or ("arg", k), argument k passed through; ``single``: one value, not a tuple."""
    computed: tuple[tuple[str, int], ...]
    items: tuple[tuple[str, int], ...]
    single: bool


class _StandIn:
    """An argument's rank and dtype at the stand-in sizes (the tracer reads shape and dtype only)."""

    def __init__(self, rank: int, dtype: np.dtype):
        self.shape, self.dtype, self.ndim = (_STAND_IN,) * rank, dtype, rank


def form(function: int, kinds: str, signature: tuple) -> Form:
    """The form of ``function`` (an ``enrol`` number) for arguments of these ``kinds`` and
    ``signature`` (per tensor: rank, dtype name), from its trace at stand-in sizes."""
    lowered, single = _stand_in_trace(function, kinds, signature)
    return form_of(lowered.returns, single)


def _stand_in_trace(function: int, kinds: str, signature: tuple):
    """(lowered trace, single) of ``function`` at stand-in sizes, kept per signature."""
    key = (function, kinds, signature)
    got = _traces.get(key)
    if got is None:
        args: list = []
        tensors = iter(signature)
        for k in kinds:
            if k == "t":
                rank, dtype = next(tensors)
                args.append(_StandIn(rank, np.dtype(dtype)))
            else:
                args.append(1.0)
        if len(_traces) >= 256:
            _traces.clear()
        got = _traces[key] = _function(function).lowered(*args)
    return got


def form_of(returns, single: bool) -> Form:
    """A ``Form`` from a lowered trace's ``returns`` (see ``frontend/lowered.Lowered``)."""
    computed: list[tuple[str, int]] = []
    items: list[tuple[str, int]] = []
    exprs = 0
    for r in returns:
        if r[0] == "arg":
            items.append(("arg", r[1]))
            continue
        key = ("out", r[1]) if r[0] == "out" else ("expr", exprs)
        exprs += r[0] == "expr"
        if key not in computed:             # a value returned twice is one result of the operator
            computed.append(key)
        items.append(("op", computed.index(key)))
    return Form(tuple(computed), tuple(items), single)


def _function(function: int):
    fn = _functions.get(function)
    if fn is None:
        raise KfuseError(f"kfuse::call: jitted function {function} no longer exists (a compiled graph outlived it)")
    return fn


def _arguments(kinds: str, tensors, numbers) -> list:
    t, n = iter(tensors), iter(numbers)
    return [next(t) if k == "t" else next(n) for k in kinds]


def traced_call(fn, args: tuple):
    """A jitted call as Dynamo traces it (``JitFunction.__call__`` under ``torch.compile``): one
    ``kfuse::call`` node, the pass-through results taken from the arguments."""
    if "op" not in _state:
        raise KfuseError(f"{fn.__name__}: called inside torch.compile before kfuse could register its torch "
                         "operator; import torch before kfuse, or call the function once outside torch.compile")
    torch = sys.modules["torch"]
    kinds = "".join("t" if isinstance(a, torch.Tensor) else "n" for a in args)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if any(t.layout != torch.strided for t in tensors):
        raise KfuseError(f"{fn.__name__}: a sparse tensor argument inside torch.compile is not supported; "
                         "call the function outside the compiled region (torch.compiler.disable)")
    numbers = [float(a) for a in args if not isinstance(a, torch.Tensor)]
    signature = tuple((t.dim(), _dtype_name(t.dtype)) for t in tensors)
    shape = _state["form"](fn.op_key, kinds, signature)
    results = _state["op"](fn.op_key, kinds, tensors, numbers)
    items = [results[k] if where == "op" else args[k] for where, k in shape.items]
    return items[0] if shape.single else tuple(items)


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fake(function: int, kinds: str, tensors, numbers) -> list:
    """The operator's results as empty tensors of the right shapes (torch's fake tensors while
    tracing): program outputs by the program's size rules, scalar arithmetic 0-d."""
    from ..runtime.binding import result_shapes
    args = _arguments(kinds, tensors, numbers)
    signature = tuple((t.dim(), _dtype_name(t.dtype)) for t in tensors)
    lowered, single = _stand_in_trace(function, kinds, signature)
    shapes = {name: tuple(args[k].shape) for name, k in lowered.inputs if kinds[k] == "t"}
    outs = result_shapes(lowered.program, shapes)
    like = tensors[0]
    return [like.new_empty(outs[lowered.outputs[k]]) if where == "out" else like.new_empty(())
            for where, k in form_of(lowered.returns, single).computed]


def run(function: int, kinds: str, tensors, numbers) -> list:
    """The operator's implementation: the jitted function's call, each program output in a tensor
    of its own; results that would alias an input or each other are copied (never expected)."""
    fn = _function(function)
    args = _arguments(kinds, tensors, numbers)
    results = fn.run_separately(tuple(args))
    seen = {t.data_ptr() for t in tensors if t.numel()}
    out = []
    for r in results:
        if r.numel() and r.data_ptr() in seen:
            r = r.clone()
        seen.add(r.data_ptr())
        out.append(r)
    return out


__all__ = ["OP", "Form", "compiling", "enrol", "register", "form", "form_of", "traced_call", "fake", "run"]
