"""What the runtime runs, and the one question it asks the compiler.

``Artifact``: a compiled program as an immutable value -- the program, its generated kernels (as
``LaunchedKernel``: the spec and the launch description), the element type and its CUDA module
(this program's own, or one it shares with other programs: one NVRTC compile for many candidate
plans).  The texts are rendered on first use by callables the compiler hands over (the runtime
never reaches into the compiler for them): the module of these kernels alone, and the module of a
device loop's persistent or merged kernel (its text made by ``codegen/loop/``, ``ir/loop.py``'s
writer) with these kernels as device functions.

``Resolve``: ``resolve(sizes, device_scalars) -> Artifact``, the artifact a call at ``sizes``
(dimension id -> size) runs, with the scalar inputs ``device_scalars`` read by address.  The
compiled script hands one to the runtime (``runtime/executor.Executor``); planning for another
size class or for device scalars stays behind it.  The runtime keeps its own tables per artifact
(launch shapes, block orders, loaded modules), keyed by the artifact's identity."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Mapping, Protocol

from .kernel import KernelSpec, LaunchInfo
from .program import Program


class LaunchedKernel(Protocol):
    """A generated kernel as the runtime sees it: what it computes (the calls and the arrays
    each follows, for block orders) and how it is launched."""

    @property
    def spec(self) -> KernelSpec: ...

    @property
    def launch(self) -> LaunchInfo: ...


@dataclass(frozen=True, eq=False)
class Artifact:
    """See the module docstring.  Compared and hashed by identity: the runtime's tables are keyed
    by it."""
    program: Program
    dtype: str
    kernels: tuple[LaunchedKernel, ...]
    render_module: Callable[[], str] = field(repr=False)            # this program's own module
    render_persistent: Callable[[str], str] = field(repr=False)     # a persistent kernel's module
    shared: str | None = field(default=None, repr=False)            # a module shared with others

    @cached_property
    def own_source(self) -> str:
        """The CUDA module of this program's kernels alone."""
        return self.render_module()

    @property
    def source(self) -> str:
        """The CUDA module the kernels are loaded from: the shared one, else their own."""
        return self.shared if self.shared is not None else self.own_source

    def persistent_source(self, kernel: str) -> str:
        """The module of the persistent kernel ``kernel`` (its text) that runs these kernels as
        device functions, one after the other in one launch."""
        return self.render_persistent(kernel)

    def sharing(self, source: str) -> "Artifact":
        """The same artifact, its kernels loaded from ``source`` (a module holding them among
        others)."""
        return replace(self, shared=source)


class Resolve(Protocol):
    """The runtime's one question to the compiler (see the module docstring)."""

    def __call__(self, sizes: Mapping[int, int], device_scalars: frozenset[str]) -> Artifact: ...


__all__ = ["Artifact", "LaunchedKernel", "Resolve"]
