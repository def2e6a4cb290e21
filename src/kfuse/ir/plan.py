"""A plan: which calls run in which kernel, in launch order, with every implementation choice;
and its JSON form (the tuning store's records), rebuilt only after checking it fits the program."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import KfuseError
from .kernel import KernelCall, KernelSpec
from .program import Program, ScalarArg


@dataclass(frozen=True)
class Plan:
    program: Program
    kernels: tuple[KernelSpec, ...]
    predicted: float | None = None                  # seconds, by the model, at the model's sizes
    parts: tuple[float, ...] = ()                   # predicted seconds per kernel
    # the fusion implementations it was built from (fusion.space.Implementation), when searched
    implementations: tuple = field(default=(), compare=False)
    # the search's kernel of each implementation (codegen.KernelCode): the lower stage carries
    # those laid out for these calls instead of laying them out again (codegen.generate)
    codes: tuple = field(default=(), compare=False, repr=False)

    def summary(self) -> str:
        """One line: each kernel's calls with their variants, kernels separated by "; "."""
        return "; ".join(" + ".join(f"{kc.call.function.name}/{kc.describe().split('/', 1)[-1]}"
                                    for kc in k.calls) for k in self.kernels)

    def describe(self) -> str:
        head = f"plan for {self.program.name}: {len(self.kernels)} kernel(s)"
        if self.predicted is not None:
            head += f", predicted {self.predicted * 1e6:.1f} us"
        lines = [head]
        for n, k in enumerate(self.kernels):
            extra = f", {k.ipb} instance(s) per block" if k.nesting == 1 else ""
            pred = f", predicted {self.parts[n] * 1e6:.1f} us" if self.parts else ""
            lines.append(f"  kernel {n} {k.name}: loop along {k.loop}, {k.iters or 'auto'} serial iteration(s)"
                         + (f" unrolled by {k.unroll}" if k.unroll > 1 else "")
                         + (f", {k.span} instances across it per block" if k.span > 1 else "") + extra + pred)
            for kc in k.calls:
                lines.append(f"    {kc.call.text():40s} [{kc.describe()}]  (line {kc.call.line})"
                             + _expression(kc.call))
        return "\n".join(lines)


def _expression(call) -> str:
    """What a synthesized function computes, in the call's own names (``: sigmoid(v2) - y``)."""
    fn = call.function
    if not fn.synthesized or "=" not in fn.math:
        return ""
    names = {p.name: (a.text(limit=40) if hasattr(a, "text") else a.name) for p, a in zip(fn.inputs, call.args)}
    text = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: names.get(m.group(0), m.group(0)), fn.math.split("=", 1)[1])
    return f": {text.strip()[:100]}"


def plan_to_json(plan: Plan) -> list[dict]:
    return [{"name": k.name, "iters": k.iters, "ipb": k.ipb, "loop": k.loop, "unroll": k.unroll, "span": k.span,
             "stores": sorted(k.stores),
             "calls": [{"call": kc.call.index, "variant": kc.variant.name, "macros": dict(kc.macros)}
                       for kc in k.calls]} for k in plan.kernels]


MAX_NAME = 64                                                      # a stored name's most characters
_IDENT = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME - 1}}}")
_KERNEL_NAME = re.compile(r"k[0-9]{1,6}_[A-Za-z0-9_]{1,200}")      # as the planner names kernels


def kernel_name(n: int, functions: list[str]) -> str:
    """The planner's name of its ``n``-th kernel, which runs calls of ``functions`` in order:
    ``k<n>_<function>_<function>...``, at most ``MAX_NAME`` characters -- where the names do not
    fit, as many as fit and ``_and<k>more`` for the other k (a longer name, five synthesized
    functions fused, made a plan whose JSON form ``plan_problem`` refused: a tuned winner was
    ignored, and ``with_plan``'s plan read by address failed).  ``k<n>`` keeps names distinct."""
    head = f"k{n}_"
    full = head + "_".join(functions)
    if len(full) <= MAX_NAME:
        return full
    for kept in range(len(functions) - 1, 0, -1):
        name = f"{head}{'_'.join(functions[:kept])}_and{len(functions) - kept}more"
        if len(name) <= MAX_NAME:
            return name
    return full[:MAX_NAME]                  # one function's name alone too long: a prefix of it


def _is_int(v, low: int = 0, high: int = 1 << 31) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def plan_problem(plan) -> str | None:
    """The first field of a plan's JSON form that is not what kfuse writes (kernel names are C
    identifiers: they go into CUDA source), or None."""
    if not isinstance(plan, list) or not plan:
        return "plan"
    for n, k in enumerate(plan):
        where = f"plan[{n}]"
        if not isinstance(k, dict):
            return where
        if not isinstance(k.get("name"), str) or not _IDENT.fullmatch(k["name"]) or k["name"].startswith("__"):
            return f"{where}.name (not a C identifier)"
        for f, low in (("iters", 0), ("ipb", 1), ("unroll", 1), ("span", 1)):
            if (f in k or f != "span") and not _is_int(k.get(f), low, 1 << 20):
                return f"{where}.{f}"
        if k.get("loop") not in ("i", "j"):
            return f"{where}.loop"
        if not isinstance(k.get("stores"), list) or not all(_is_int(x) for x in k["stores"]):
            return f"{where}.stores"
        calls = k.get("calls")
        if not isinstance(calls, list) or not calls:
            return f"{where}.calls"
        for c in calls:
            if not isinstance(c, dict) or not _is_int(c.get("call"), 0, 1 << 20) \
                    or not isinstance(c.get("variant"), str) or not _IDENT.fullmatch(c["variant"]) \
                    or not isinstance(c.get("macros"), dict) \
                    or not all(isinstance(m, str) and _is_int(v, 1, 1 << 16) for m, v in c["macros"].items()):
                return f"{where}.calls"
    return None


def plan_from_json(program: Program, data: list[dict]) -> Plan:
    """Rebuild a plan; raises KfuseError when it does not fit the program (never trusted blindly)."""
    problem = plan_problem(data)
    if problem:
        raise KfuseError(f"stored plan has an invalid {problem}")
    try:
        kernels = []
        for k in data:
            calls = []
            for c in k["calls"]:
                call = program.calls[c["call"]]
                var = next(v for v in call.function.variants if v.name == c["variant"])
                macros = tuple((m, int(c["macros"][m])) for m in var.macros)
                bad = [f"{m}={v}" for m, v in macros if v not in var.macros[m]]
                if bad or set(c["macros"]) != set(var.macros):
                    raise ValueError(f"macros {c['macros']} do not fit variant {var.name} {dict(var.macros)}")
                calls.append(KernelCall(call, var, macros))
            kernels.append(KernelSpec(str(k["name"]), tuple(calls), iters=int(k["iters"]), ipb=int(k["ipb"]),
                                      stores=frozenset(int(s) for s in k["stores"]), loop=str(k["loop"]),
                                      unroll=int(k["unroll"]), span=int(k.get("span", 1))))
    except (KeyError, IndexError, StopIteration, TypeError, ValueError, OverflowError) as e:
        raise KfuseError(f"stored plan does not fit the program: {e!r}") from None
    covered = sorted(kc.call.index for k in kernels for kc in k.calls)
    if covered != list(range(len(program.calls))):
        raise KfuseError("stored plan does not cover every call exactly once")
    problem = _order_problem(program, kernels)
    if problem:
        raise KfuseError(f"stored plan {problem}")
    return Plan(program, tuple(kernels))


def _order_problem(program: Program, kernels: list[KernelSpec]) -> str | None:
    """What makes a plan's kernels unlike any the planner makes, or None: kernel names not of
    kfuse's form ``k<n>_...`` (so never a C or CUDA keyword nor a name of the prelude) or not
    distinct; a call placed before a call whose value it reads; a value read outside its kernel
    or returned that the kernel does not store; a store of a value the kernel does not compute."""
    names = [k.name for k in kernels]
    bad = next((n for n in names if not _KERNEL_NAME.fullmatch(n)), None)
    if bad is not None:
        return f"names a kernel {bad!r}: kfuse's kernels are named k<number>_<function>"
    if len(set(names)) != len(names):
        return "names two kernels alike"
    where: dict[int, tuple[int, int]] = {}          # value id -> (kernel, position) of its call
    for n, k in enumerate(kernels):
        for pos, kc in enumerate(k.calls):
            for v in kc.call.outputs:
                where[v.id] = (n, pos)
    returned = {v.id for v in program.outputs}
    needed: list[set[int]] = [set() for _ in kernels]
    for v in program.outputs:
        if v.id in where:
            needed[where[v.id][0]].add(v.id)
    for n, k in enumerate(kernels):
        for pos, kc in enumerate(k.calls):
            reads = [a for a in kc.call.args if not isinstance(a, ScalarArg)]
            reads += [v for a in kc.call.args if isinstance(a, ScalarArg) for v in a.values()]
            for v in reads:
                if v.id not in where:
                    continue                        # an input
                if where[v.id] >= (n, pos):
                    return f"runs {kc.call.text()} before the call that computes {v.name}"
                if where[v.id][0] != n:
                    needed[where[v.id][0]].add(v.id)
    for n, k in enumerate(kernels):
        own = {v.id for kc in k.calls for v in kc.call.outputs}
        if not k.stores <= own:
            return f"has kernel {k.name} store values it does not compute ({sorted(k.stores - own)[:5]})"
        missing = needed[n] - k.stores
        if missing:
            v = program.values[min(missing)]
            what = "returned" if v.id in returned else "read by a later kernel"
            return f"has kernel {k.name} leave {v.name} unstored, which is {what}"
    return None
