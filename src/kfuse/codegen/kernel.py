"""One kernel from one or more calls: schedule, element placement, barriers, CUDA text.

The structure follows the paper's Algorithms 1 and 2:

1. shared-memory allocation (one array, one slice per on-chip element that needs it)
2. register arrays for elements whose every access has the same thread-to-data mapping
3. thread and instance indices
4. invariant loads (inputs that do not follow the loop axis)
5. clears of accumulated outputs (reduce outputs that do not follow the loop axis)
6. the serial loop over ``iters`` instances along the loop axis (``i`` or ``j``, chosen per
   kernel): loads, computes, stores; with ``unroll`` U the loads of U instances are issued
   before their computes (more memory requests in flight)
7. stores of accumulated outputs

Each routine call is preceded by a local barrier exactly when a shared element it accesses
was accessed since the last barrier by another routine with a different mapping (one access
being a write) -- the paper's two conditions, with the loop's back edge taken into account --
and runs only in the threads it needs (whole warps), with its own thread indices.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, NamedTuple
from math import prod

from ..errors import FusionError
from ..library.mappings import MAPPINGS
from ..library.schema import AXES, REDUCE_OPS, Library, Param, Routine, Variant
from ..ir.kernel import GlobalArg, KernelCall, KernelSpec, LaunchInfo
from ..ir.program import Call, ScalarArg, Value


MAX_SHARED_BYTES = 48 * 1024   # static shared memory per block (checked in float64, the larger type)
MAX_REGISTER_SLOTS = 128    # on-chip entries per thread in registers (with unrolled and spanned copies)


@dataclass(frozen=True)
class Element:
    key: str                        # C name in the kernel
    kind: str                       # scalar | subvector | tile
    shape: tuple[int, ...]
    pitch: int                      # tile row pitch in shared memory (columns + padding)
    value: Value | None             # None for a call-private local
    identity: str = "0"             # value a clear writes
    axes: tuple[str, ...] = ("i", "j")   # instance axes it follows (locals: private to the instance)

    @property
    def size(self) -> int:
        if self.kind == "tile":
            return self.shape[0] * self.pitch
        return prod(self.shape) if self.shape else 1


@dataclass(frozen=True)
class Access:
    element: str
    mode: str                       # r | w | acc
    mapping: str
    threads: tuple[int, int]

    @property
    def identity(self) -> tuple[str, int, int] | None:
        """Same identity = same thread-to-data mapping; None = arbitrary indexing."""
        return None if self.mapping == "any" else (self.mapping, *self.threads)


@dataclass
class Step:
    phase: str                      # pre | loop | post
    kind: str                       # routine | clear
    kc: KernelCall
    routine: Routine | None
    accesses: list[Access]
    element: str | None = None      # for clears
    barrier: bool = False
    once_per_span: bool = False     # runs once for the block's span of instances, not per instance


@dataclass
class Placement:
    registers: dict[str, int] = field(default_factory=dict)       # element -> slots per thread
    shared: dict[str, int] = field(default_factory=dict)          # element -> offset (entries)
    shared_size: int = 0                                          # entries per instance


@dataclass(frozen=True)
class KernelCode:
    spec: KernelSpec
    render: Callable[[], tuple[str, tuple[str, ...]]] = field(repr=False, compare=False)
    sources: tuple[str, ...]        # library .cu files it needs (paths)
    launch: LaunchInfo
    placement: Placement
    steps: tuple[Step, ...]

    @cached_property
    def _text(self) -> tuple[str, tuple[str, ...]]:
        return self.render()

    @property
    def source(self) -> str:
        """The __global__ function."""
        return self._text[0]

    @property
    def views(self) -> tuple[str, ...]:
        """Shared-view struct definitions it needs."""
        return self._text[1]

    @property
    def barriers(self) -> int:
        return sum(s.barrier for s in self.steps)


# ----------------------------------------------------------------------------------------
def build_kernel(spec: KernelSpec, lib: Library) -> KernelCode:
    """Generate one kernel (raises FusionError when the choices cannot be realised)."""
    return _Builder(spec, lib).build()


def build_copies(spec: KernelSpec, lib: Library, copies) -> list[KernelCode | FusionError]:
    """The kernel of ``spec`` with each (unroll, span) of ``copies``: scheduled, placed and given
    its barriers once (none of which depends on them), emitted per copy.  Each entry is the
    kernel or the FusionError that refused it."""
    base = _Builder(replace(spec, unroll=1, span=1), lib)
    base.schedule()
    pl = base.place()
    base.barriers(pl)
    out: list[KernelCode | FusionError] = []
    frame = None
    for unroll, span in copies:
        if out and isinstance(out[0], FusionError) and copies[0] == (1, 1):
            out.append(out[0])          # copies only add constraints to the refused single one
            continue
        try:
            copy_spec = base.spec if (unroll, span) == (1, 1) else replace(spec, unroll=unroll, span=span)
            _check_copies_in_registers(copy_spec, pl)   # before copying or emitting anything
            b = copy.copy(base)
            b.spec = copy_spec
            b.check_spec()
            _check_register_entries(b, pl)
            # emitting a span marks steps run once per span: those copies get steps of their own
            b.steps = ([Step(s.phase, s.kind, s.kc, s.routine, s.accesses, s.element, s.barrier)
                        for s in base.steps] if span > 1 else base.steps)
            frame = frame or _frame(b, pl)         # the same for every copy
            out.append(_emit(b, pl, frame))
        except FusionError as e:
            out.append(e.with_traceback(None))      # kept without its frames (no reference cycles)
    return out


class _Builder:
    def __init__(self, spec: KernelSpec, lib: Library):
        self.spec, self.lib = spec, lib
        self.elements: dict[str, Element] = {}
        self.call_elem: dict[tuple[int, str], str] = {}     # (call index, param/local) -> element
        self.steps: list[Step] = []
        self.check_spec()

    def check_spec(self) -> None:
        spec = self.spec
        nest = {kc.call.function.nesting for kc in spec.calls}
        if len(nest) != 1:
            raise FusionError(f"{spec.name}: calls of different nesting depth cannot share a kernel")
        if spec.iters < 0 or spec.ipb < 1 or spec.unroll < 1 or spec.span < 1:
            raise FusionError(f"{spec.name}: iterations must be >= 0 (0: auto), instances per block, "
                              "unroll and span >= 1")
        if spec.nesting == 1 and spec.span != 1:
            raise FusionError(f"{spec.name}: a span across the loop axis needs a nested kernel")
        if spec.nesting == 2 and spec.ipb != 1:
            raise FusionError(f"{spec.name}: nested kernels run one instance per block")
        if spec.loop not in AXES[spec.nesting]:
            raise FusionError(f"{spec.name}: loop axis {spec.loop!r} is not an instance axis")
        self.tile: tuple[int, int] | None = None    # nested kernels: the instances' tile
        if spec.nesting == 2:
            tiles = {kc.tile(self.lib) for kc in spec.calls}
            if len(tiles) != 1:
                raise FusionError(f"{spec.name}: calls whose instances are tiles of different shapes "
                                  f"({', '.join(f'{r}x{c}' for r, c in sorted(tiles))}) cannot share a kernel")
            (self.tile,) = tiles

    def shape_of(self, p: Param) -> tuple[int, ...]:
        """Entries of a parameter's element in this kernel (its tile, or the piece of a vector
        along the tile side its axis runs)."""
        return self.lib.element_shape(p.element, self.tile, p.index)

    # -- elements ------------------------------------------------------------------------
    def new_element(self, v: Value | None, base: str, p_elem: str, shape: tuple[int, ...], pad: int,
                    identity: str = "0", axes: tuple[str, ...] = ("i", "j")) -> str:
        name, n = base, 2
        while name in self.elements:
            name, n = f"{base}_{n}", n + 1
        pitch = shape[1] + pad if p_elem == "tile" else 0
        self.elements[name] = Element(name, p_elem, shape, pitch, v, identity, tuple(axes))
        return name

    def widen_pitch(self, name: str, p: Param) -> None:
        el = self.elements[name]
        if el.kind == "tile" and el.shape[1] + p.pad > el.pitch:
            self.elements[name] = replace(el, pitch=el.shape[1] + p.pad)

    def arg_element(self, kc: KernelCall, name: str) -> str:
        """The element a routine argument refers to (outputs and locals created on first use)."""
        key = (kc.call.index, name)
        if key in self.call_elem:
            return self.call_elem[key]
        fn = kc.call.function
        p = next((p for p in fn.params if p.name == name), None)
        if p is not None:           # an output (inputs are bound by their load)
            v = kc.call.bindings()[p.name]
            ident = REDUCE_OPS[p.reduce] if p.reduce else "0"
            el = self.new_element(v, v.label, p.element, self.shape_of(p), p.pad, ident,
                                  p.index)
            self.produced[(v.id, p.index)] = (el, p)
        else:
            loc = next(loc for loc in kc.variant.locals if loc.name == name)
            el = self.new_element(None, f"{kc.call.name}_{loc.name}", loc.element,
                                  tuple(kc.value_of(x) for x in loc.shape), loc.pad)
        self.call_elem[key] = el
        return el

    # -- schedule --------------------------------------------------------------------------
    def schedule(self) -> None:
        loop = self.spec.loop
        self.produced: dict[tuple[int, tuple[str, ...]], tuple[str, Param]] = {}
        loaded: dict[tuple, str] = {}
        cleared: set[str] = set()
        for kc in self.spec.calls:
            fn, var = kc.call.function, kc.variant
            params = {p.name: p for p in fn.params}
            binds = kc.call.bindings()
            for r in var.routines:
                if r.kind != "load":
                    continue
                p = params[r.param]
                v = binds[p.name]
                made = self.produced.get((v.id, p.index))
                if made is not None:    # produced on chip in this kernel: no load
                    el, prod = made
                    self.check_exchange(kc, p, v, prod)
                    self.call_elem[(kc.call.index, p.name)] = el
                    self.widen_pitch(el, p)
                    continue
                hoisted = p.hoist and not p.follows(loop)
                acc = r.elements[0]
                key = (v.id, p.index, r.fn, acc.mapping, kc.shape(r), kc.macros, hoisted)
                if key in loaded:       # the same load by an earlier call: read once
                    self.call_elem[(kc.call.index, p.name)] = loaded[key]
                    self.widen_pitch(loaded[key], p)
                    continue
                # a partial-sum input is read by one instance of those it is summed over: its
                # copy belongs to the instance, not to the axes it follows
                el = self.new_element(v, v.label, p.element, self.shape_of(p), p.pad,
                                      axes=AXES[2] if p.partial else p.index)
                loaded[key] = self.call_elem[(kc.call.index, p.name)] = el
                self.add_routine("pre" if hoisted else "loop", kc, r)
            for r in var.computes:
                for a in r.elements:
                    el = self.arg_element(kc, a.name)
                    if a.mode == "acc" and el not in cleared:
                        # accumulated across the loop: cleared once before it; otherwise cleared
                        # in each iteration before the first routine that accumulates into it
                        # (an output only handed on as partial sums is cleared every iteration:
                        # its consumer does the accumulating)
                        p = params.get(a.name)
                        accumulated = (p is not None and p.dir == "out" and not p.follows(loop)
                                       and binds[p.name].id in self.spec.stores)
                        cleared.add(el)
                        self.steps.append(Step("pre" if accumulated else "loop", "clear", kc, None,
                                               [Access(el, "w", a.mapping, kc.shape(r))], element=el))
                self.add_routine("loop", kc, r)
            for r in var.routines:
                if r.kind != "store":
                    continue
                p = params[r.param]
                if binds[p.name].id not in self.spec.stores:
                    continue            # consumed on chip only
                phase = "loop" if p.follows(loop) else "post"
                for f in var.finishes(p.name):      # the store's own steps before it, where it runs
                    self.add_routine(phase, kc, f)
                self.add_routine(phase, kc, r)

    def check_exchange(self, kc: KernelCall, p: Param, v: Value, prod: Param) -> None:
        """May input p of kc take the element an earlier call of this kernel produced?"""
        where = f"{self.spec.name}: {kc.call.text()}: {p.name} = {v.name}"
        if prod.reduce:
            if not p.partial:
                raise FusionError(f"{where} is the result of a reduction in the same kernel "
                                  "(needs a global barrier)")
            if not prod.follows(self.spec.loop) and v.id in self.spec.stores:
                raise FusionError(f"{where}: partial sums are exchanged only when the producer's "
                                  f"output follows the loop axis {self.spec.loop} or stays on chip")
        elif p.partial:
            raise FusionError(f"{where}: takes partial sums, but {v.name} is a map result")

    def add_routine(self, phase: str, kc: KernelCall, r: Routine) -> None:
        X, Y = kc.shape(r)
        if (X * Y) % 32 and 32 % (X * Y):
            raise FusionError(f"{kc.describe()} routine {r.name}: {X}x{Y} threads neither divides a warp "
                              "nor is whole warps")
        acc = []
        for a in r.elements:
            key = self.arg_element(kc, a.name)
            el = self.elements[key]
            reason = MAPPINGS[a.mapping].check(el.shape, X, Y)
            if reason:
                raise FusionError(f"{kc.describe()} routine {r.name}: {a.name}: {reason}")
            acc.append(Access(key, a.mode, a.mapping, (X, Y)))
        self.steps.append(Step(phase, "routine", kc, r, acc))

    # -- placement -------------------------------------------------------------------------
    def place(self) -> Placement:
        pl = Placement()
        by_elem: dict[str, list[Access]] = {}
        for s in self.steps:
            for a in s.accesses:
                by_elem.setdefault(a.element, []).append(a)
        offset = 0
        for key, accs in by_elem.items():
            ids = {a.identity for a in accs}
            first = accs[0]
            if len(ids) == 1 and None not in ids and MAPPINGS[first.mapping].registers:
                pl.registers[key] = MAPPINGS[first.mapping].slots(self.elements[key].shape, *first.threads)
                continue
            bad = [a.mapping for a in accs if not MAPPINGS[a.mapping].shared]
            if bad:
                raise FusionError(f"{self.spec.name}: element {key} is accessed with different mappings "
                                  f"but mapping {bad[0]} cannot use shared memory")
            pl.shared[key] = offset
            offset += self.elements[key].size
        pl.shared_size = offset
        return pl

    # -- barriers --------------------------------------------------------------------------
    def barriers(self, pl: Placement) -> None:
        """Mark steps that need a local barrier before them (paper, Algorithm 2, line 1)."""
        pre = [s for s in self.steps if s.phase == "pre"]
        loop = [s for s in self.steps if s.phase == "loop"]
        post = [s for s in self.steps if s.phase == "post"]
        since: list[Access] = []

        def visit(s: Step) -> None:
            nonlocal since
            shared = [a for a in s.accesses if a.element in pl.shared]
            if any(_conflict(a, b) for a in shared for b in since):
                s.barrier = True
            if s.barrier:
                since = []
            since.extend(shared)

        for s in pre:
            visit(s)
        entry = list(since)
        for _ in range(3):              # until the loop body's barriers are stable
            since = list(entry)
            for s in loop:
                visit(s)
            entry_again = since
            since = list(entry_again)
            changed = False
            for s in loop:
                before = s.barrier
                visit(s)
                changed |= s.barrier != before
            if not changed:
                break
        for s in post:
            visit(s)

    # -- emission --------------------------------------------------------------------------
    def build(self) -> KernelCode:
        self.schedule()
        pl = self.place()
        self.barriers(pl)
        return _emit(self, pl)


def _conflict(a: Access, b: Access) -> bool:
    """Two shared-memory accesses race without a barrier between them."""
    if a.element != b.element:
        return False
    if a.mode == "r" and b.mode == "r":
        return False
    return a.identity is None or a.identity != b.identity


# ----------------------------------------------------------------------------------------
def _view_struct(el: Element, mapping: str, X: int, Y: int) -> tuple[str, str]:
    """(type name, definition) of a shared-memory view of an element under a mapping."""
    dims = "x".join(map(str, el.shape)) or "1"
    name = f"KfSh_{el.kind}{dims}" + (f"p{el.pitch}" if el.kind == "tile" else "") + f"_{mapping}"
    if mapping != "any":
        name += f"_{X}x{Y}"
    lines = [f"struct {name} {{   // {el.kind} {dims} in shared memory, mapping {mapping}"
             + (f" for {X}x{Y} threads" if mapping != "any" else "")]
    lines.append("    real* p; int tx, ty;")
    lines.append(f"    static constexpr int slots = {MAPPINGS[mapping].slots(el.shape, X, Y)};")
    off = MAPPINGS[mapping].offset(el.shape, el.pitch, X, Y)
    if off is not None:
        lines.append(f"    KF_DEVICE real& operator()(int k) const {{ return p[{off}]; }}")
    if el.kind == "tile":
        lines.append(f"    KF_DEVICE real& at(int r, int c) const {{ return p[r * {el.pitch} + c]; }}")
    elif el.kind == "subvector":
        lines.append("    KF_DEVICE real& at(int e) const { return p[e]; }")
    else:
        lines.append("    KF_DEVICE real& at() const { return p[0]; }")
    lines.append("};")
    return name, "\n".join(lines)


def _scalar_expr(a: ScalarArg) -> str:
    if a.value is None:
        return f"real({a.literal!r})"
    return f"{'-' if a.negate else ''}s_{a.value.label}"


def _emit(b: _Builder, pl: Placement, frame: _Frame | None = None) -> KernelCode:
    spec, lib = b.spec, b.lib
    nest, U, L = spec.nesting, spec.unroll, spec.loop
    V = spec.span
    other = ("j" if L == "i" else "i") if nest == 2 else None
    _check_copies_in_registers(spec, pl)
    outside, per_slot = _copy_sets(b)
    if V > 1:
        _check_span(b, per_slot)
    for s in b.steps:
        s.once_per_span = V > 1 and not _step_per_slot(s, per_slot)
    _check_register_entries(b, pl)
    shapes, T, threads, smem, extents, axis_dims, args, clears, sources, wait_phase = frame or _frame(b, pl)
    first = spec.calls[0]

    def ename(key: str, u: int, v: int = 0) -> str:
        name = f"e_{key}" if U == 1 or key in outside else f"e_{key}_u{u}"
        return name + (f"_v{v}" if V > 1 and key in per_slot else "")

    def slot(u: int | None, v: int) -> str:
        """Suffix of the instance index (and activity flag) of unrolled copy u, span slot v."""
        return ("" if u is None else f"_u{u}") + (f"_v{v}" if V > 1 else "")

    def render() -> tuple[str, tuple[str, ...]]:
        """The CUDA text (built only when asked for: ranking needs none of it)."""
        params_c = []
        for g in args:
            if g.kind == "array":
                v = g.value
                params_c.append(f"real* __restrict__ {g.name}_p")
                params_c += [f"long long {g.name}_{n}" for n in
                             {"vector": ("n",), "matrix": ("rows", "cols"), "scalar": ()}[v.type]]
            elif g.kind == "scalar":
                params_c.append(f"real s_{g.name}")
            elif g.kind == "count":
                params_c.append(f"long long {g.name}")
            else:
                params_c.append("int iters")

        out: list[str] = []
        views: dict[str, str] = {}
        w = out.append
        for kc in spec.calls:
            w(f"// kernel {spec.name}: {kc.call.text()}  [{kc.describe()}]  (script line {kc.call.line})"
              if kc is first else f"//     + {kc.call.text()}  [{kc.describe()}]  (script line {kc.call.line})")
        w(f"// {'2-level nested' if nest == 2 else 'unnested'}; {T} threads per instance, "
          f"{spec.ipb} instance(s) per block; serial loop along {L}, {spec.iters or 'auto'} iteration(s)"
          + (f", unrolled by {U}" if U > 1 else "") + f"; {smem} shared entries, "
          f"{len(pl.registers)} element(s) in registers")
        # the block order is chosen at launch and compiled in (runtime/order.py, the module is built
        # per choice): bit 0 walks the blocks from the last, so that a kernel starts on the data
        # the kernel before it touched last (still in L2); bit 1 (nested kernels) numbers the
        # blocks along the loop axis first; bit 2 lets the next kernel launch early (PDL)
        w(f"#ifndef KF_ORDER_{spec.name}")
        w(f"#define KF_ORDER_{spec.name} 0")
        w("#endif")
        w(f'extern "C" __global__ void __launch_bounds__({threads})')
        w(f"{spec.name}(" + ",\n    ".join(params_c) + ")")
        w("{")
        if smem:
            w(f"    __shared__ real kf_smem[{smem}];")
        for g in args:
            if g.kind != "array":
                continue
            v = g.value
            if v.type == "matrix":
                w(f"    const KfMat g_{g.name}{{{g.name}_p, {g.name}_rows, {g.name}_cols}};")
            elif v.type == "vector":
                w(f"    const KfVec g_{g.name}{{{g.name}_p, {g.name}_n}};")
            else:
                w(f"    const KfVec g_{g.name}{{{g.name}_p, 1}};   // scalar result")
        w(f"    constexpr int order = KF_ORDER_{spec.name};   // block order (runtime/order.py)")
        w("    if (order & 4) kf_allow_next();   // the next kernel may launch now (it waits for this one)")
        w("    const long long kf_b = (order & 1) ? (long long)(gridDim.x - 1 - blockIdx.x) : (long long)blockIdx.x;")
        if nest == 1:
            w(f"    const int lt = threadIdx.x % {T};            // thread in its instance")
            w(f"    const int inst = threadIdx.x / {T};          // instance slot in the block")
            w(f"    const long long first_i = kf_b * iters * {spec.ipb};")
            w("    KfIx ix{lt, 0, first_i + inst, 0};")
            first_expr, count = "first_i", "n_i"
        else:
            w("    const int lt = threadIdx.x;                  // thread in the instance")
            nb = f"n_{other}"
            if V > 1:
                nb = f"nb_{other}"
                w(f"    const long long nb_{other} = (n_{other} + {V - 1}) / {V};   // blocks across the loop, "
                  f"{V} instances each")
            w(f"    const long long kf_groups = gridDim.x / {nb};   // block groups along the loop")
            w(f"    const long long first_{L} = ((order & 2) ? kf_b % kf_groups : kf_b / {nb}) * iters;  // loop axis {L}")
            w(f"    const long long blk_{other} = ((order & 2) ? kf_b / kf_groups : kf_b % {nb})"
              + (f" * {V};" if V > 1 else ";"))
            w(f"    KfIx ix{{lt, 0, {'first_i' if L == 'i' else 'blk_i'}, {'blk_j' if L == 'i' else 'first_j'}}};")
            first_expr, count = f"first_{L}", f"n_{L}"
        for X, Y in shapes:
            w(f"    const int tx_{X}x{Y} = lt % {X}, ty_{X}x{Y} = lt / {X};")
        for key, el in b.elements.items():
            desc = f"{el.kind} {'x'.join(map(str, el.shape))}" + (f" ({el.value.name})" if el.value else "")
            if key in pl.registers:
                for u in range(1 if key in outside else U):
                    for v in range(V if key in per_slot else 1):
                        w(f"    KfReg<{pl.registers[key]}> {ename(key, u, v)};   // {desc}: registers")
            elif key in pl.shared:
                base = f"kf_smem + {pl.shared[key]}" + (f" + inst * {pl.shared_size}" if spec.ipb > 1 else "")
                w(f"    real* const sh_{key} = {base};   // {desc}: shared")
        if V > 1:
            for v in range(V):
                w(f"    KfIx ix_v{v} = ix; ix_v{v}.{other} = blk_{other} + {v};   // span slot {v}")
                w(f"    const bool act_v{v} = ix_v{v}.{other} < n_{other};")
        w("")

        def routine_call(s: Step, indent: str, u: int | None, v: int = 0) -> list[str]:
            kc, r = s.kc, s.routine
            X, Y = kc.shape(r)
            conds = []
            if u is not None and (nest == 1 or U > 1 or V > 1):
                conds.append(f"act{slot(u, v)}")
            elif V > 1 and v > 0:
                conds.append(f"act_v{v}")
            if X * Y < T:
                conds.append(f"lt < {X * Y}")
            inner = indent + "    "
            head = f"{indent}// {kc.call.name}: {kc.call.text()} -- {r.name}"
            if X * Y < T:
                head += f" ({X}x{Y} threads, the rest idle)"
            if U > 1 and u is not None:
                head += f" [iteration +{u}]"
            if V > 1:
                head += " [once for the span]" if s.once_per_span else f" [span slot {v}]"
            lines = [head, f"{indent}if ({' && '.join(conds)}) {{" if conds else f"{indent}{{"]
            ixv = "ix" if u is None and V == 1 else f"ix{slot(u, v)}"
            lines.append(f"{inner}const KfIx rix{{tx_{X}x{Y}, ty_{X}x{Y}, {ixv}.i, {ixv}.j}};")
            cargs = ["rix"]
            binds = kc.call.bindings()
            for a, acc in zip(r.args, _accesses_in_order(s)):
                if a.kind == "global":
                    cargs.append(f"g_{binds[a.name].label}")
                elif a.kind == "scalar":
                    cargs.append(_scalar_expr(binds[a.name]))
                else:
                    key = acc.element
                    if key in pl.registers:
                        cargs.append(ename(key, u or 0, v))
                    else:
                        vname, vdef = _view_struct(b.elements[key], acc.mapping, X, Y)
                        views[vname] = vdef
                        lines.append(f"{inner}{vname} v_{key}{{sh_{key}, tx_{X}x{Y}, ty_{X}x{Y}}};")
                        cargs.append(f"v_{key}")
            targs = f"<{', '.join(str(v) for _, v in kc.macros)}>" if kc.macros else ""
            lines.append(f"{inner}{r.fn}{targs}({', '.join(cargs)});")
            lines.append(f"{indent}}}")
            return lines

        def clear(s: Step, indent: str, u: int | None, v: int = 0) -> list[str]:
            acc = s.accesses[0]
            el = b.elements[acc.element]
            X, Y = acc.threads
            ident = f"real({el.identity})"
            lines = [f"{indent}// {s.kc.call.name}: clear {el.key} (reduction identity)"]
            if acc.element in pl.registers:
                lines.append(f"{indent}#pragma unroll")
                lines.append(f"{indent}for (int k = 0; k < {pl.registers[acc.element]}; ++k) "
                             f"{ename(acc.element, u or 0, v)}.v[k] = {ident};")
            elif acc.mapping == "any":
                lines.append(f"{indent}for (int e = lt; e < {el.size}; e += {T}) sh_{el.key}[e] = {ident};")
            else:
                vname, vdef = _view_struct(el, acc.mapping, X, Y)
                views[vname] = vdef
                slots = MAPPINGS[acc.mapping].slots(el.shape, X, Y)
                guard = f"if (lt < {X * Y}) " if X * Y < T else ""
                lines.append(f"{indent}{guard}{{ {vname} v{{sh_{el.key}, tx_{X}x{Y}, ty_{X}x{Y}}}; "
                             f"for (int k = 0; k < {slots}; ++k) v(k) = {ident}; }}")
            return lines

        def emit(s: Step, indent: str, u: int | None, v: int = 0) -> None:
            if s.barrier:
                w(f"{indent}__syncthreads();   // local barrier: shared data changes hands")
            out.extend(clear(s, indent, u, v) if s.kind == "clear" else routine_call(s, indent, u, v))

        def emit_slots(s: Step, indent: str, u: int | None) -> None:
            """A step once per span slot when it touches per-slot data, else once."""
            for v in range(1 if s.once_per_span else V):
                emit(s, indent, u, v)

        def wait(phase: str) -> None:
            if phase == wait_phase:
                w("    kf_wait_prior();   // the launch before this one (a clear, a kernel) has finished")

        wait("pre")
        if any(s.phase == "pre" for s in b.steps):
            w("    // ---- before the serial loop: invariant loads, cleared accumulators")
            for s in b.steps:
                if s.phase == "pre":
                    emit_slots(s, "    ", None)
            w("")
        wait("loop")
        w(f"    // ---- serial loop along {L}: iters instance(s) per {'slot' if nest == 1 else 'block'}"
          + (f", {U} at a time" if U > 1 else ""))
        w(f"    for (int it = 0; it < iters; it += {U}) {{")
        block_first = f"{first_expr} + (long long)it * {spec.ipb}" if nest == 1 else f"{first_expr} + it"
        w(f"        if ({block_first} >= {count}) break;   // the whole block is past the end")
        for u in range(U):
            if nest == 1:
                w(f"        KfIx ix_u{u} = ix; ix_u{u}.i = {first_expr} + (long long)(it + {u}) * {spec.ipb} + inst;")
                w(f"        const bool act_u{u} = it + {u} < iters && ix_u{u}.i < n_i;")
            elif V == 1:
                w(f"        KfIx ix_u{u} = ix; ix_u{u}.{L} = {first_expr} + it + {u};")
                if U > 1:
                    w(f"        const bool act_u{u} = it + {u} < iters && ix_u{u}.{L} < {count};")
            else:
                for v in range(V):
                    w(f"        KfIx ix_u{u}_v{v} = ix_v{v}; ix_u{u}_v{v}.{L} = {first_expr} + it + {u};")
                    w(f"        const bool act_u{u}_v{v} = act_v{v} && it + {u} < iters && ix_u{u}_v{v}.{L} < {count};")
        loop_steps = [s for s in b.steps if s.phase == "loop"]

        def is_load(s: Step) -> bool:
            return s.routine is not None and s.routine.kind == "load"

        if U == 1 and V == 1:
            for s in loop_steps:
                emit(s, "        ", 0)
        else:   # loads of every copy first, then the rest copy by copy
            for u in range(U):
                for s in loop_steps:
                    if is_load(s):
                        emit_slots(s, "        ", u)
            rest = [s for s in loop_steps if not is_load(s)]
            for u in range(U):
                # per-slot steps slot by slot, between the clears and the stores of the elements
                # the span's slots share (their partial results summed over the slots on chip)
                for s in rest:
                    if s.kind == "clear" and s.once_per_span:
                        emit(s, "        ", u)
                for v in range(V):
                    for s in rest:
                        if not s.once_per_span:
                            emit(s, "        ", u, v)
                for s in rest:
                    if s.kind != "clear" and s.once_per_span:
                        emit(s, "        ", u)
        w("    }")
        wait("post")
        if any(s.phase == "post" for s in b.steps):
            w("    // ---- after the serial loop: stores of accumulated outputs")
            for s in b.steps:
                if s.phase == "post":
                    emit_slots(s, "    ", None)
        w("}")
        return "\n".join(out), tuple(views.values())


    launch = LaunchInfo(spec.name, threads, nest, spec.iters, spec.ipb, tuple(axis_dims), tuple(extents),
                        tuple(args), tuple(clears), smem, tuple(kc.call.index for kc in spec.calls), L, V,
                        U, any(s.phase != "loop" for s in b.steps), wait_phase is not None)
    return KernelCode(spec, render, sources, launch, pl, tuple(b.steps))


class _Frame(NamedTuple):
    """What emission derives from the calls, the placement and the instances per block -- the
    same for every (unroll, span) copy of a kernel."""
    shapes: list[tuple[int, int]]       # thread shapes of the routines and accesses
    T: int                              # threads per instance
    threads: int                        # per block
    smem: int                           # shared entries per block
    extents: tuple[int, ...]
    axis_dims: tuple[int, ...]
    args: tuple[GlobalArg, ...]
    clears: tuple[tuple[Value, str], ...]
    sources: tuple[str, ...]
    wait_phase: str | None              # "pre", "loop", "post": where kf_wait_prior goes; None: none


def _frame(b: _Builder, pl: Placement) -> _Frame:
    """The copy-independent part of emission, with its checks (raises FusionError)."""
    spec, lib = b.spec, b.lib
    nest = spec.nesting
    shapes = sorted({s.kc.shape(s.routine) for s in b.steps if s.routine is not None}
                    | {a.threads for s in b.steps for a in s.accesses})
    T = max(X * Y for X, Y in shapes)
    threads = T * spec.ipb
    if threads > 1024:
        raise FusionError(f"{spec.name}: {threads} threads per block (max 1024)")
    if threads % 32:
        raise FusionError(f"{spec.name}: {threads} threads per block is not whole warps "
                          f"({T} per instance: use more instances per block)")
    if T < 32 and any(X * Y != T for X, Y in shapes):
        raise FusionError(f"{spec.name}: instances smaller than a warp cannot idle threads")
    smem = pl.shared_size * spec.ipb
    if smem * 8 > MAX_SHARED_BYTES:
        raise FusionError(f"{spec.name}: {smem} shared entries per block exceed 48 KB in float64")
    first = spec.calls[0]
    extents = (b.tile if nest == 2 else (lib.subvector,))
    axis_dims = first.call.axes
    for kc in spec.calls[1:]:
        if kc.call.axes != axis_dims:
            raise FusionError(f"{spec.name}: {kc.call.text()} does not share the instance space of "
                              f"{first.call.text()}")

    # kernel arguments: arrays first (in order of first use), then scalars, counts, iterations
    args: list[GlobalArg] = []
    seen_vals: set[int] = set()
    scalars: dict[int, Value] = {}
    for s in b.steps:
        if s.routine is None:
            continue
        for a in s.routine.args:
            if a.kind == "global":
                v = s.kc.call.bindings()[a.name]
                if v.id not in seen_vals:
                    seen_vals.add(v.id)
                    args.append(GlobalArg("array", v.label, v))
            elif a.kind == "scalar":
                sa = s.kc.call.bindings()[a.name]
                if sa.value is not None:
                    scalars[sa.value.id] = sa.value
    args += [GlobalArg("scalar", v.label, v) for v in scalars.values()]
    args += [GlobalArg("count", f"n_{ax}", axis=d, divisor=e)
             for ax, d, e in zip("ij", axis_dims, extents)]
    args.append(GlobalArg("iters", "iters"))
    clears = []
    for kc in spec.calls:
        for p in kc.call.function.outputs:
            v = kc.call.bindings()[p.name]
            if p.reduce and v.id in spec.stores:
                clears.append((v, REDUCE_OPS[p.reduce]))
    # a kernel launched while the launch before it still runs (the clear of its reduced outputs,
    # or the kernel before it in the plan) waits for it (kf_wait_prior) at the start of the first
    # phase that touches a cleared output or reads a value an earlier kernel wrote (any value
    # that is not a script input and not written here)
    own = {kc.call.bindings()[p.name].id for kc in spec.calls for p in kc.call.function.outputs}
    prior = {v.id for v, _ in clears} | {g.value.id for g in args if g.kind == "array" and g.value.type != "scalar"
                                         and not g.value.is_input and g.value.id not in own}
    wait_phase = next((ph for ph in ("pre", "loop", "post")
                       if any(s.phase == ph and s.routine is not None
                              and any(a.kind == "global" and s.kc.call.bindings()[a.name].id in prior
                                      for a in s.routine.args)
                              for s in b.steps)), None)
    sources = tuple(dict.fromkeys(str(kc.variant.source) for kc in spec.calls))
    return _Frame(shapes, T, threads, smem, tuple(extents), tuple(axis_dims), tuple(args), tuple(clears), sources,
                  wait_phase)


def _accesses_in_order(s: Step) -> list[Access | None]:
    """Align the routine's args with its element accesses (None for non-element args)."""
    it = iter(s.accesses)
    return [next(it) if a.kind == "element" else None for a in s.routine.args]


def _copy_sets(b: "_Builder") -> tuple[set[str], set[str]]:
    """(elements used outside the serial loop, elements with one copy per span slot).  Elements
    used only inside the loop get one copy per unrolled iteration; with a span, an element that
    follows the axis across the loop has one copy per slot, and the others (vectors along the
    loop axis) are shared by the slots: loaded once, or summed over the slots and stored once."""
    outside = {a.element for s in b.steps if s.phase != "loop" for a in s.accesses}
    other = "j" if b.spec.loop == "i" else "i"
    per_slot = {key for key, el in b.elements.items() if b.spec.span == 1 or other in el.axes}
    return outside, per_slot


def _check_copies_in_registers(spec: KernelSpec, pl: Placement) -> None:
    """Unrolled and spanned copies exist only for elements in registers."""
    if spec.unroll > 1 and pl.shared:
        raise FusionError(f"{spec.name}: unrolled serial iterations need every element in registers "
                          f"({', '.join(pl.shared)} in shared memory)")
    if spec.span > 1 and pl.shared:
        raise FusionError(f"{spec.name}: a span of {spec.span} instances across the loop needs every element "
                          f"in registers ({', '.join(pl.shared)} in shared memory)")


def _check_register_entries(b: "_Builder", pl: Placement) -> None:
    """The elements in registers, with their unrolled and spanned copies, must not spill."""
    U, V = b.spec.unroll, b.spec.span
    outside, per_slot = _copy_sets(b)
    slots = sum(n * (1 if key in outside else U) * (V if key in per_slot else 1)
                for key, n in pl.registers.items())
    if slots > MAX_REGISTER_SLOTS:
        raise FusionError(f"{b.spec.name}: {slots} register entries per thread for {U} unrolled iteration(s) "
                          f"x {V} span slot(s) (at most {MAX_REGISTER_SLOTS}: more would spill)")


def _step_per_slot(s: Step, per_slot: set[str]) -> bool:
    """Does the step run once per span slot?  Computes always do; loads, clears and stores when
    their element has a copy per slot."""
    if s.routine is not None and s.routine.kind == "compute":
        return True
    return any(a.element in per_slot for a in s.accesses)


def _check_span(b: "_Builder", per_slot: set[str]) -> None:
    """Elements shared by the span's slots are either loaded once and read by every slot, or
    partial results that every slot adds to (cleared before the slots, stored after them)."""
    for key, el in b.elements.items():
        if key in per_slot:
            continue
        accs = [(s, a) for s in b.steps for a in s.accesses if a.element == key]
        loaded = any(s.routine is not None and s.routine.kind == "load" for s, _ in accs)
        for s, a in accs:
            if s.routine is None or s.routine.kind != "compute":
                continue
            if (loaded and a.mode != "r") or (not loaded and a.mode != "acc"):
                raise FusionError(f"{b.spec.name}: with a span across the loop, {s.kc.call.text()} "
                                  f"({s.routine.name}) {'writes' if loaded else 'reads'} {key}, which "
                                  "the span's instances share")
    for s in b.steps:
        if (s.routine is not None and s.routine.kind == "compute"
                and all(a.element not in per_slot for a in s.accesses)):
            raise FusionError(f"{b.spec.name}: with a span across the loop, {s.kc.call.text()} "
                              f"({s.routine.name}) touches no per-instance data")
