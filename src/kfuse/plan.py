"""Plans: which calls run in which kernel, in launch order, with every implementation choice."""
from __future__ import annotations

from dataclasses import dataclass

from .codegen.kernel import KernelCall, KernelCode, KernelSpec, build_kernel
from .graph import DependencyGraph
from .library.schema import Library, Variant
from .program import Program

DEFAULT_BY = 8          # preferred threads in y for nested functions (when the variant allows it)
DEFAULT_IPB = 8         # preferred instances per block for unnested functions
DEFAULT_ITERS = 0       # serial iterations (0: chosen at launch from the sizes)


@dataclass(frozen=True)
class Plan:
    program: Program
    kernels: tuple[KernelSpec, ...]

    def describe(self, codes: list[KernelCode] | None = None) -> str:
        lines = [f"plan for {self.program.name}: {len(self.kernels)} kernel(s)"]
        for n, k in enumerate(self.kernels):
            lines.append(f"  kernel {n} {k.name}: {k.iters or 'auto'} serial iteration(s)"
                         + (f", {k.ipb} instance(s) per block" if k.nesting == 1 else ""))
            for kc in k.calls:
                lines.append(f"    {kc.call.text():40s} [{kc.describe()}]  (line {kc.call.line})")
        return "\n".join(lines)


def default_macros(variant: Variant) -> tuple[tuple[str, int], ...]:
    out = []
    for name, values in variant.macros.items():
        pick = DEFAULT_BY if DEFAULT_BY in values else values[len(values) // 2]
        out.append((name, pick))
    return tuple(out)


def preferred_loop(fn) -> str:
    """Walk an axis that the reduced outputs leave out, so they accumulate across the loop."""
    for p in fn.outputs:
        if p.reduce:
            missing = [a for a in fn.axes if a not in p.index]
            if missing:
                return missing[0]
    return "i"


def unfused_plan(program: Program, lib: Library) -> Plan:
    """Every call its own kernel (the paper's "code without fusions"), in a dependency order."""
    graph = DependencyGraph(program)
    kernels = []
    for n, idx in enumerate(graph.topological_order()):
        call = program.calls[idx]
        variant = call.function.variants[0]
        ipb = 1
        if call.function.nesting == 1:
            allowed = variant.instances_per_block
            ipb = DEFAULT_IPB if DEFAULT_IPB in allowed else max(allowed)
        kernels.append(KernelSpec(f"k{n}_{call.function.name}",
                                  (KernelCall(call, variant, default_macros(variant)),),
                                  iters=DEFAULT_ITERS, ipb=ipb, loop=preferred_loop(call.function),
                                  stores=frozenset(v.id for v in call.outputs)))
    return Plan(program, tuple(kernels))


def generate(plan: Plan, lib: Library) -> list[KernelCode]:
    return [build_kernel(k, lib) for k in plan.kernels]
