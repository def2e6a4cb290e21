"""kfuse inside ``torch.compile``: the torch custom operator ``kfuse::call``.

Traced by TorchDynamo, a call of a jitted function or of a compiled script would be graph breaks
(kfuse's call path is no torch code) and ``fullgraph=True`` would fail.  Under ``torch.compile`` a
call instead becomes one node of the graph: ``torch.ops.kfuse.call(target, kinds, tensors,
numbers)``, a custom operator registered once per process when torch is imported, by the
low-level ``torch.library.Library`` (its implementation is then the CPU and CUDA kernel the
dispatcher calls directly: ``torch.library.custom_op`` would add Python layers to every call, an
autograd wrapper, a redispatch and an aliasing check, which cost more than kfuse's own call path):

* ``target`` numbers what is called (a ``JitTarget`` for a jitted function, a ``ScriptTarget`` for
  a compiled script; ``enrol``, a weak table), ``kinds`` says per argument whether it is a tensor
  (``t``) or a number (``n``), and the tensors and numbers come in their own lists (a custom
  operator's schema is typed);
* its implementation is the call itself, each program output in a tensor of its own (``out=``: a
  custom operator's results may not alias each other or an input);
* its fake implementation gives the results' shapes from the program's size rules
  (``runtime/binding.result_shapes``), so the graph is traced without running anything;
* results a jitted function passes through unchanged (a loop state's matrix) are not the
  operator's: the Python around it (which Dynamo traces) returns the argument itself.  Which
  results those are is the *form* of the call at those kinds, ranks and dtypes (``Form``),
  computed when Dynamo traces (``torch.compiler.assume_constant_result``): for a jitted function
  from a trace at stand-in sizes (a traced function's structure does not depend on its sizes:
  ``.shape`` is refused while tracing), for a script from its program.

A tensor that requires grad is refused by a jitted function's call path (kfuse computes no
gradients), and so is one passed to ``kfuse::call`` while Dynamo traces with grad mode on: the
operator has no autograd kernel, and its results would come out without a ``grad_fn``.
"""
from __future__ import annotations

import itertools
import logging
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import KfuseError
from ..ir.program import ScalarArg

OP = "kfuse::call"
SCHEMA = "(int target, str kinds, Tensor[] tensors, float[] numbers) -> Tensor[]"
_targets: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_numbers = itertools.count()
_state: dict[str, Any] = {}         # "op": the registered operator, "form": ``form`` as Dynamo calls it
_STAND_IN = 4                       # every size of a stand-in argument (a traced function's form is size-free)


def compiling() -> bool:
    """Is TorchDynamo tracing the caller?  Until the operator is registered this also registers
    it, where torch is imported and nothing is being traced (registering while Dynamo traces is
    refused by Dynamo); ``register`` then puts torch's own ``torch.compiler.is_compiling`` in this
    name's place (one call on every call's path)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if torch.compiler.is_compiling():
        return True
    register()
    return False


def enrol(target) -> int:
    """A number for a target, by which the operator finds it (a weak reference: the target is
    held by what it calls for)."""
    key = next(_numbers)
    _targets[key] = target
    return key


def register() -> bool:
    """Register ``kfuse::call`` where torch is imported (once; kfuse never imports torch itself).
    Called when a function is decorated and by every call made outside torch.compile until it is
    registered (``compiling``); returns whether the operator exists."""
    if "op" in _state or "failed" in _state:
        return "op" in _state
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "library") or not hasattr(torch.library, "register_fake"):
        return False                # no torch yet, or one before torch.library.register_fake (2.4)
    try:
        lib = torch.library.Library("kfuse", "DEF")
        lib.define("call" + SCHEMA)
        for key in ("CUDA", "CPU"):        # CPU tensors reach kfuse's call path, which refuses them
            lib.impl("call", run, key)
        torch.library.register_fake(OP, fake, lib=lib)
        _state["lib"] = lib                # the registration lasts as long as this object
        _state["form"] = torch.compiler.assume_constant_result(form)
        _state["op"] = torch.ops.kfuse.call
    except Exception as e:   # noqa: BLE001 - a torch that refuses the operator: kfuse works without it
        _state["failed"] = True
        logging.getLogger("kfuse").warning(f"the torch operator {OP} could not be registered ({type(e).__name__}: "
                                           f"{e}); kfuse calls inside torch.compile will break its graph")
        return False
    globals()["compiling"] = torch.compiler.is_compiling
    return True


@dataclass(frozen=True)
class Form:
    """How a call's results come out of the operator at one signature: ``computed``, the
    operator's results in order (("out", k): program output k; ("expr", i): the i-th returned
    scalar arithmetic), and ``items``, each returned value as ("op", j), the operator's result j,
    or ("arg", k), argument k passed through; ``single``: one value, not a tuple."""
    computed: tuple[tuple[str, int], ...]
    items: tuple[tuple[str, int], ...]
    single: bool


def form_of(returns, single: bool) -> Form:
    """A ``Form`` from a lowered trace's ``returns`` (("out", k) | ("arg", k) | ("expr", node):
    ``frontend/lowered.Lowered``)."""
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


def form(target: int, kinds: str, signature: tuple) -> Form:
    """The form of the call of ``target`` (an ``enrol`` number) with arguments of these ``kinds``
    and ``signature`` (per tensor: rank, dtype name)."""
    return _target(target).op_form(kinds, signature)


def _target(target: int):
    got = _targets.get(target)
    if got is None:
        raise KfuseError(f"kfuse::call: target {target} no longer exists (a compiled graph outlived the "
                         "function or script it calls)")
    return got


def arguments(kinds: str, tensors, numbers) -> list:
    """The call's arguments in order, from the operator's lists."""
    t, n = iter(tensors), iter(numbers)
    return [next(t) if k == "t" else next(n) for k in kinds]


def signature_of(tensors) -> tuple:
    """Per tensor: (rank, dtype name), what a form depends on."""
    return tuple((t.dim(), str(t.dtype).removeprefix("torch.")) for t in tensors)


def fake(target: int, kinds: str, tensors, numbers) -> list:
    """The operator's fake implementation (shapes only, while torch.compile traces)."""
    return _target(target).op_fake(kinds, tensors, numbers)


def traced_call(key: int, name: str, args):
    """A call as Dynamo traces it (under ``torch.compile``): one ``kfuse::call`` node of target
    ``key``, the pass-through results taken from the arguments ``args`` (in order); ``name``
    names the callee in errors."""
    if "op" not in _state:
        raise KfuseError(f"{name}: called inside torch.compile before kfuse could register its torch operator "
                         "(kfuse first ran before torch was imported); import torch before decorating the "
                         "function or compiling the script, or call it once outside torch.compile")
    import torch        # imported already; a plain import is what Dynamo traces (sys.modules is a dict
    #                     it would walk while inductor's threads import modules)
    kinds = "".join("t" if isinstance(a, torch.Tensor) else "n" for a in args)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if any(t.layout != torch.strided for t in tensors):
        raise KfuseError(f"{name}: a sparse tensor argument inside torch.compile is not supported; call it "
                         "outside the compiled region (torch.compiler.disable)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise KfuseError(f"{name}: an argument requires grad inside torch.compile, and {OP} computes no "
                         "gradients (its results would have no grad_fn); call it under torch.no_grad(), or "
                         "pass the tensor detached")
    numbers = [float(a) for a in args if not isinstance(a, torch.Tensor)]
    shape = _state["form"](key, kinds, signature_of(tensors))
    results = _state["op"](key, kinds, tensors, numbers)
    items = [results[k] if where == "op" else args[k] for where, k in shape.items]
    return items[0] if shape.single else tuple(items)


def run(target: int, kinds: str, tensors, numbers) -> list:
    """The operator's implementation: the target's call (``op_run``), each result a tensor of its
    own; a result that would alias an input or another result is copied (never expected)."""
    results = _target(target).op_run(kinds, tensors, numbers)
    seen = {t.data_ptr() for t in tensors if t.numel()}
    out = []
    for r in results:
        if r.numel() and r.data_ptr() in seen:
            r = r.clone()
        seen.add(r.data_ptr())
        out.append(r)
    return out


class _StandIn:
    """An argument's rank and dtype at the stand-in sizes (the tracer reads shape and dtype only)."""

    def __init__(self, rank: int, dtype: np.dtype):
        self.shape, self.dtype, self.ndim = (_STAND_IN,) * rank, dtype, rank


class JitTarget:
    """``kfuse::call``'s side of a jitted function (``jit/decorator.JitFunction``: its ``lowered``
    and ``run_separately``): the form from a trace at stand-in sizes, kept per signature."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self._traces: dict[tuple, Any] = {}

    def _stand_in(self, kinds: str, signature: tuple):
        """(lowered trace, single) at stand-in sizes."""
        key = (kinds, signature)
        got = self._traces.get(key)
        if got is None:
            args: list = []
            tensors = iter(signature)
            for k in kinds:
                if k == "t":
                    rank, dtype = next(tensors)
                    args.append(_StandIn(rank, np.dtype(dtype)))
                else:
                    args.append(1.0)
            if len(self._traces) >= 64:
                self._traces.clear()
            got = self._traces[key] = self.fn.lowered(*args)
        return got

    def op_form(self, kinds: str, signature: tuple) -> Form:
        lowered, single = self._stand_in(kinds, signature)
        return form_of(lowered.returns, single)

    def op_fake(self, kinds: str, tensors, numbers) -> list:
        """The results as empty tensors (torch's fake tensors while tracing): program outputs by the
        program's size rules, scalar arithmetic 0-d."""
        from ..runtime.binding import result_shapes
        args = arguments(kinds, tensors, numbers)
        lowered, single = self._stand_in(kinds, signature_of(tensors))
        shapes = {name: tuple(args[k].shape) for name, k in lowered.inputs if kinds[k] == "t"}
        outs = result_shapes(lowered.program, shapes)
        like = tensors[0]
        return [like.new_empty(outs[lowered.outputs[k]] if where == "out" else ())
                for where, k in form_of(lowered.returns, single).computed]

    def op_run(self, kinds: str, tensors, numbers) -> list:
        return self.fn.run_separately(tuple(arguments(kinds, tensors, numbers)))


class ScriptTarget:
    """``kfuse::call``'s side of a compiled script (``CompiledScript``): arguments are its inputs
    in declaration order; it returns the return statement's values, none an input."""

    def __init__(self, compiled) -> None:
        self.compiled = compiled
        self._form: Form | None = None

    def op_form(self, kinds: str, signature: tuple) -> Form:
        """The return statement's values (the same at every signature: made once)."""
        if self._form is None:
            prog = self.compiled.program
            returns = [("expr", None) if isinstance(r, ScalarArg) else ("out", prog.outputs.index(r))
                       for r in prog.returned]
            self._form = form_of(returns, len(returns) == 1)
        return self._form

    def _shapes(self, kinds: str, tensors, numbers) -> tuple[dict, list]:
        from ..runtime.binding import result_shapes
        prog = self.compiled.program
        args = arguments(kinds, tensors, numbers)
        shapes = {v.name: tuple(a.shape) for v, a, k in zip(prog.inputs, args, kinds) if k == "t"}
        return result_shapes(prog, shapes), args

    def op_fake(self, kinds: str, tensors, numbers) -> list:
        outs, _ = self._shapes(kinds, tensors, numbers)
        names = [v.name for v in self.compiled.program.outputs]
        return [tensors[0].new_empty(outs[names[k]] if where == "out" else ())
                for where, k in self.op_form(kinds, ()).computed]

    def op_run(self, kinds: str, tensors, numbers) -> list:
        prog = self.compiled.program
        shapes, args = self._shapes(kinds, tensors, numbers)
        inputs = {v.name: a for v, a in zip(prog.inputs, args)}
        like = tensors[0]
        out = {v.name: like.new_empty(shapes[v.name]) for v in prog.outputs}
        res = self.compiled.calls.executor.call(inputs, out, False, None)
        outs = res if isinstance(res, tuple) else (res,)
        computed: list = []
        tail = self.compiled.calls.scalar_tail
        if tail is not None:
            sources = [outs[k] if where == "out" else inputs[k] for where, k in tail.reads]
            computed = list(tail.run(like, sources))
        return [outs[k] if where == "out" else computed[k] for where, k in self.op_form(kinds, ()).computed]


__all__ = ["OP", "SCHEMA", "Form", "JitTarget", "ScriptTarget", "compiling", "enrol", "register", "form",
           "form_of", "arguments", "signature_of", "fake", "traced_call", "run"]
