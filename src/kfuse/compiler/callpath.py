"""The call path of a compiled script: the runtime state beside the immutable value (its
executor's bindings, graphs and temporaries; the returned arithmetic's kernel; the loaded
modules), made on first use and dropped by ``release``.

``CompiledScript`` (``compiled.py``) is the value and the facade a user calls; what runs a call,
and what a benchmark or a test reads of the runtime (``outputs`` without the returned arithmetic,
``functions`` on a device, ``scalars_source``), is here."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Protocol

from ..ir.artifact import Artifact
from ..ir.program import Program
from . import torchop
from .pipeline import load

if TYPE_CHECKING:
    from ..runtime.control import ScalarTail
    from ..runtime.executor import Executor


class Compiled(Protocol):
    """What a call path reads of its compiled script (``compiled.CompiledScript``)."""

    @property
    def program(self) -> Program: ...

    @property
    def dtype(self) -> str: ...

    @property
    def artifact(self) -> Artifact: ...

    def resolve(self, device_scalars, dims: dict[int, int]) -> "Compiled": ...


class CallPath:
    """See the module docstring."""

    def __init__(self, compiled: Compiled) -> None:
        self._compiled = compiled
        self._executor: "Executor | None" = None
        self._tail: "ScalarTail | None" = None
        self.op_target = torchop.ScriptTarget(compiled)     # kfuse::call's side of it (torchop.py)
        self.op_key = torchop.enrol(self.op_target)

    @property
    def executor(self) -> "Executor":
        """The runtime's executor (``runtime/executor.py``): bindings per argument signature,
        graphs; handed ``resolve_artifact``, the runtime's one question to the compiler."""
        if self._executor is None:
            from ..runtime.binding import Returns
            from ..runtime.executor import Executor
            c = self._compiled
            self._executor = Executor(c.program, c.dtype, self.resolve_artifact)
            tail = self.scalar_tail
            if tail is not None:
                self._executor.returns = Returns(tail, tail.code.reads)
        return self._executor

    def resolve_artifact(self, sizes: Mapping[int, int], device_scalars: frozenset[str]) -> Artifact:
        """The artifact a call at ``sizes`` (dimension id -> size) runs, with the scalar inputs
        ``device_scalars`` read by address (``CompiledScript.resolve``; ``ir/artifact.Resolve``)."""
        return self._compiled.resolve(device_scalars, dict(sizes)).artifact

    def release(self) -> None:
        """Drop the device memory of the calls (temporaries, graphs, bindings); the next call builds
        it again.  The empirical search releases each candidate once timed: 20 candidates of a
        large script would otherwise hold 20 sets of temporaries."""
        self._executor = None

    def outputs(self, out: dict | None = None, sync: bool = False, stream=None, **inputs):
        """Run like a call, returning the program's outputs (``program.outputs``, in order; a single
        array for one) without the returned arithmetic: the values the kernels compute, for
        checks against the reference.  The same as a call for a script that returns no
        arithmetic."""
        res = self.executor.call(inputs, out, sync, stream)
        n = len(self._compiled.program.outputs)
        if isinstance(res, tuple) and len(res) > n:     # the returned arithmetic's results follow
            return res[0] if n == 1 else res[:n]
        return res

    @property
    def scalar_tail(self) -> "ScalarTail | None":
        """The returned scalar arithmetic as one small kernel (``runtime/control.ScalarTail``, its
        text ``codegen/loop/scalars.ScalarCode``'s), or None when the script returns none."""
        c = self._compiled
        if self._tail is None and c.program.returned_arithmetic():
            from ..codegen.loop.scalars import ScalarCode
            from ..runtime.control import ScalarTail
            self._tail = ScalarTail(ScalarCode.script(c.program, c.dtype))
        return self._tail

    @property
    def scalars_source(self) -> str | None:
        """The CUDA module of the returned scalar arithmetic (``kf_scalars``, every operand read
        by address; a scalar input passed as a number is passed by value instead), or None."""
        tail = self.scalar_tail
        return None if tail is None else tail.source()

    def module(self, device: int, orders: tuple[int, ...] = ()):
        """The compiled module on a device, built for the kernels' orders (runtime/order.py; none
        given: order 0 throughout), compiled once per choice and kept by the runtime
        (``runtime/modules.py``, per artifact): the pipeline's load stage."""
        return load(self._compiled.artifact, device, orders)

    def functions(self, device: int, orders: tuple[int, ...] = ()) -> list:
        """The compiled kernels on a device, in launch order."""
        from ..runtime import modules
        return modules.functions(self._compiled.artifact, device, orders)

    def fill_function(self, device: int, orders: tuple[int, ...] = ()):
        """The module's kf_fill kernel (clears reduced outputs before a kernel)."""
        from ..runtime import modules
        return modules.fill_function(self._compiled.artifact, device, orders)


__all__ = ["CallPath"]
