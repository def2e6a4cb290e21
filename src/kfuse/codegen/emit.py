"""A kernel's layout (``layout.py``) as CUDA text.

The __global__ function holds, in order:

1. shared-memory allocation (one array, one slice per on-chip element that needs it)
2. register arrays for elements whose every access has the same thread-to-data mapping
3. thread and instance indices
4. invariant loads (inputs that do not follow the loop axis)
5. clears of accumulated outputs (reduce outputs that do not follow the loop axis)
6. the serial loop over ``iters`` instances along the loop axis: loads, computes, stores; with
   ``unroll`` U the loads of U instances are issued before their computes (more memory requests
   in flight); with ``span`` V, V instances across the loop share the block
7. stores of accumulated outputs

Each routine call is preceded by the local barrier the layout marked, and runs only in the
threads it needs (whole warps), with its own thread indices.  The text shared with the
calibration's micro-kernels comes from ``skeleton.py``.
"""
from __future__ import annotations

from ..ir.halo import recomputed
from ..ir.program import ScalarArg
from ..library.mappings import MAPPINGS
from . import grids, halo, skeleton as sk
from .layout import Access, Layout, Step


def render(lay: Layout) -> tuple[str, tuple[str, ...]]:
    """(the __global__ function, the shared-view struct definitions it needs)."""
    return _render(lay, False)


def render_device(lay: Layout) -> tuple[str, tuple[str, ...]]:
    """(the kernel as a device function, the shared-view struct definitions it needs), for a
    persistent kernel that runs many kernels one after the other (``codegen/loop/persistent.py``, ``merged.py``).

    The device function ``<name>_dev(args, block, blocks, smem)`` is the kernel's body for one
    block: ``<name>_args`` holds its parameters in the kernel's order (the argument block a
    launch of the kernel takes, as a struct), the block number and count replace ``blockIdx.x``
    and ``gridDim.x`` (the persistent kernel walks the kernel's blocks itself), its shared
    memory is the caller's, and its local barrier is a named barrier over its own threads (a
    persistent block may be wider than the kernel's: the extra warps skip it)."""
    return _render(lay, True)


def _render(lay: Layout, device: bool) -> tuple[str, tuple[str, ...]]:
    e = _Emitter(lay, device)
    e.head()
    e.indices()
    e.declarations()
    e.phases()
    return "\n".join(e.out), tuple(e.views.values())


def _scalar_code(a: ScalarArg, prefix: str) -> tuple[list[str], str]:
    """(declarations, expression): C text of a scalar argument.  Arithmetic over scalars is
    evaluated inline, where it is used; a subexpression it uses more than once is declared once,
    as a local named ``prefix`` and a number, before the routine call."""
    return a.c_code(_scalar_leaf, prefix)


def _scalar_leaf(a: ScalarArg) -> str:
    if a.value is None:
        return f"real({a.literal!r})"
    if not a.value.is_input or a.value.on_device:   # computed by an earlier kernel, or a 0-d device
        return f"{'-' if a.negate else ''}(*s_{a.value.label}_p)"   # array: read where it lies
    return f"{'-' if a.negate else ''}s_{a.value.label}"


def _accesses_in_order(s: Step) -> list[Access | None]:
    """Align the routine's args with its element accesses (None for non-element args)."""
    it = iter(s.accesses)
    assert s.routine is not None
    return [next(it) if a.kind == "element" else None for a in s.routine.args]


def _is_load(s: Step) -> bool:
    return s.routine is not None and s.routine.kind == "load"


class _Emitter:
    """The emission state: the layout read, the lines and view structs written.  One method per
    part of the kernel's text (head, indices, declarations, phases, the serial loop, a step),
    hence their number."""

    def __init__(self, lay: Layout, device: bool = False):
        assert lay.frame is not None, "a finished layout has its frame"
        self.device = device
        self.lay, self.spec, self.pl, self.fr = lay, lay.spec, lay.placement, lay.frame
        spec = lay.spec
        self.nest, self.U, self.V, self.L = spec.nesting, spec.unroll, spec.span, spec.loop
        self.other = ("j" if self.L == "i" else "i") if self.nest == 2 else None
        self.T = self.fr.T
        self.first_expr, self.count = sk.loop_bounds(self.nest, self.L)
        # a strip kernel (tiles spanning an axis whole) interleaves its blocks along the loop: block
        # group g walks instances g, g + G, g + 2G, ... (G groups), so that the blocks resident at
        # once read neighbouring strips (one region of the matrix, few DRAM pages and TLB entries)
        # rather than one region each
        self.strided = self.nest == 2 and any(kc.variant.whole for kc in spec.calls)
        # a kernel of cluster variants: the C consecutive blocks of a thread-block cluster are the
        # C tiles of one strip (cluster rank and tile along the strip's axis agree, up to the
        # order's reversal); they exchange values through distributed shared memory
        self.cluster = spec.cluster[0]
        # a kernel on a triangle (its call alone): the blocks walk the upper tiles (I <= J) as one
        # sequence, block b taking tiles b, b + G, b + 2G, ... (G blocks); lower tiles are never launched
        self.triangle = spec.triangle
        self.out: list[str] = []
        self.views: dict[str, str] = {}
        # values a stencil of the kernel reads around its point and another call of it makes: read
        # through halo views that evaluate their producer (ir/halo.py, codegen/halo.py)
        self.halo = recomputed(spec.calls)

    def w(self, line: str) -> None:
        self.out.append(line)

    def ename(self, key: str, u: int, v: int = 0) -> str:
        name = f"e_{key}" if self.U == 1 or key in self.lay.outside else f"e_{key}_u{u}"
        return name + (f"_v{v}" if self.V > 1 and key in self.lay.per_slot else "")

    def slot(self, u: int | None, v: int) -> str:
        """Suffix of the instance index (and activity flag) of unrolled copy u, span slot v."""
        return ("" if u is None else f"_u{u}") + (f"_v{v}" if self.V > 1 else "")

    # -- before the loop -----------------------------------------------------------------
    def params(self) -> list[str]:
        params_c = []
        for g in self.fr.args:
            if g.kind == "array" and g.value is not None:
                params_c += sk.array_params(g.name, g.value.type)
            elif g.kind == "grid":
                params_c += grids.grid_params(g.name)
            elif g.kind == "scalar":
                params_c.append(f"real s_{g.name}")
            elif g.kind == "dscalar":
                params_c.append(f"const real* __restrict__ s_{g.name}_p")
            elif g.kind == "count":
                params_c.append(f"long long {g.name}")
            elif g.kind == "flip":
                params_c.append("int kf_flip")
            else:
                params_c.append("int iters")
        return params_c

    def head(self) -> None:
        spec, fr, w = self.spec, self.fr, self.w
        first = spec.calls[0]
        for kc in spec.calls:
            w(f"// kernel {spec.name}: {kc.call.text()}  [{kc.describe()}]  (script line {kc.call.line})"
              if kc is first else f"//     + {kc.call.text()}  [{kc.describe()}]  (script line {kc.call.line})")
        w(f"// {'2-level nested' if self.nest == 2 else 'unnested'}; {self.T} threads per instance, "
          f"{spec.ipb} instance(s) per block; serial loop along {self.L}, {spec.iters or 'auto'} iteration(s)"
          + (f", unrolled by {self.U}" if self.U > 1 else "") + f"; {fr.smem} shared entries, "
          f"{len(self.pl.registers)} element(s) in registers")
        # the block order is chosen at launch and compiled in (runtime/order.py, the module is built
        # per choice): bit 0 walks the blocks from the last, so that a kernel starts on the data
        # the kernel before it touched last (still in L2); bit 1 (nested kernels) numbers the
        # blocks along the loop axis first; bit 2 lets the next kernel launch early (PDL); bit 3
        # takes bit 0 mirrored from kf_flip, which the runtime sets on every other call: a call
        # then starts on what the call before it touched last (a solver's loop over one matrix)
        w(f"#ifndef KF_ORDER_{spec.name}")
        w(f"#define KF_ORDER_{spec.name} 0")
        w("#endif")
        if self.device:
            assert self.cluster == 1, "a kernel of clusters runs only as its own launch"
            self.out += sk.device_open(spec.name, self.params())
        else:
            resident = max(kc.variant.resident_threads for kc in spec.calls)
            self.out += sk.kernel_open(spec.name, fr.threads, self.params(), fr.smem, self.cluster, resident)
        gridded = grids.grid_reads(self.lay.steps)
        plain = grids.plain_reads(self.lay.steps)
        for g in fr.args:       # an array read only through grid views needs no plain view
            if g.kind == "array" and g.value is not None and (
                    g.value.id in plain or all(v.id != g.value.id for v, _, _ in gridded)):
                w(sk.global_view(g.name, g.value.type))
        for v, rank, boundary in gridded:
            if v.id not in self.halo:       # a halo view is made where its reader is called
                w(grids.view_decl(v.label, rank, boundary))

    def indices(self) -> None:
        spec, w, L, other, V = self.spec, self.w, self.L, self.other, self.V
        if self.cluster > 1:    # bit 1 would give a cluster's blocks different strips
            w(f"    constexpr int order = KF_ORDER_{spec.name} & ~2;   // block order (runtime/order.py); "
              "a cluster's blocks are consecutive: no bands")
        else:
            w(f"    constexpr int order = KF_ORDER_{spec.name};   // block order (runtime/order.py)")
        w("    if (order & 4) kf_allow_next();   // the next kernel may launch now (it waits for this one)")
        w("    const int kf_rev = (order & 1) ^ ((order & 8) ? kf_flip : 0);   // bit 3: mirrored on every other call")
        if self.device:
            w("    const long long kf_b = kf_rev ? kf_nblk - 1 - kf_blk : kf_blk;")
        else:
            w("    const long long kf_b = kf_rev ? (long long)(gridDim.x - 1 - blockIdx.x) : (long long)blockIdx.x;")
        if self.nest == 1 and self.device:
            # a caller wider than the kernel may run several of its blocks side by side, one a group
            # of its threads (runtime/merged.py): the thread's number is its place in its group
            w(f"    const int kf_tid = threadIdx.x % {self.fr.threads};   // the thread in its block")
            self.out += sk.unnested_indices(self.T, spec.ipb, "kf_b", thread="kf_tid")
        elif self.nest == 1:
            self.out += sk.unnested_indices(self.T, spec.ipb, "kf_b")
        elif self.triangle:
            w(sk.nested_thread())
            w(f"    const long long kf_groups = {'kf_nblk' if self.device else 'gridDim.x'};   "
              "// the blocks walk the upper tiles together")
            w("    const long long first_t = kf_b;   // this block's first upper tile, then every kf_groups-th")
            w("    const long long n_tri = n_i * (n_i + 1) / 2;   // upper tiles (I, J), I <= J, of the square "
              "matrix, row by row")
            w("    KfIx ix{lt, 0, 0, 0};")
        else:
            w(sk.nested_thread())
            nb = f"n_{other}"
            if V > 1:
                nb = f"nb_{other}"
                w(f"    const long long nb_{other} = (n_{other} + {V - 1}) / {V};   // blocks across the loop, "
                  f"{V} instances each")
            w(f"    const long long kf_groups = {'kf_nblk' if self.device else 'gridDim.x'} / {nb};   "
              "// block groups along the loop")
            if self.strided:
                w(f"    const long long first_{L} = (order & 2) ? kf_b % kf_groups : kf_b / {nb};   // loop axis {L}: "
                  "this group's first instance, then every kf_groups-th")
            else:
                w(f"    const long long first_{L} = ((order & 2) ? kf_b % kf_groups : kf_b / {nb}) * iters;  // loop axis {L}")
            w(f"    const long long blk_{other} = ((order & 2) ? kf_b / kf_groups : kf_b % {nb})"
              + (f" * {V};" if V > 1 else ";"))
            w(sk.nested_index(L))
        for X, Y in self.fr.shapes:
            w(sk.thread_coords(f"tx_{X}x{Y}", f"ty_{X}x{Y}", X))

    def declarations(self) -> None:
        """Elements in registers (one copy per unrolled iteration and span slot where they have
        one) and in shared memory; the span slots' instance indices."""
        lay, pl, U, V, w = self.lay, self.pl, self.U, self.V, self.w
        for key, el in lay.elements.items():
            desc = f"{el.kind} {'x'.join(map(str, el.shape))}" + (f" ({el.value.name})" if el.value else "")
            if key in pl.registers:
                for u in range(1 if key in lay.outside else U):
                    for v in range(V if key in lay.per_slot else 1):
                        w(sk.register_decl(pl.registers[key], self.ename(key, u, v), desc))
            elif key in pl.shared:
                stride = pl.shared_size if self.spec.ipb > 1 else None
                w(sk.shared_decl(key, pl.shared[key], stride, desc))
        if V > 1:
            for v in range(V):
                w(f"    KfIx ix_v{v} = ix; ix_v{v}.{self.other} = blk_{self.other} + {v};   // span slot {v}")
                w(f"    const bool act_v{v} = ix_v{v}.{self.other} < n_{self.other};")
        w("")

    # -- steps -------------------------------------------------------------------------------
    def routine_call(self, s: Step, indent: str, u: int | None, v: int = 0) -> list[str]:
        kc, r, U, V = s.kc, s.routine, self.U, self.V
        assert r is not None
        X, Y = kc.shape(r)
        conds = []
        if u is not None and (self.nest == 1 or U > 1 or V > 1):
            conds.append(f"act{self.slot(u, v)}")
        elif V > 1 and v > 0:
            conds.append(f"act_v{v}")
        if X * Y < self.T:
            conds.append(f"lt < {X * Y}")
        inner = indent + "    "
        head = f"{indent}// {kc.call.name}: {kc.call.text()} -- {r.name}"
        if X * Y < self.T:
            head += f" ({X}x{Y} threads, the rest idle)"
        if U > 1 and u is not None:
            head += f" [iteration +{u}]"
        if V > 1:
            head += " [once for the span]" if s.once_per_span else f" [span slot {v}]"
        lines = [head, sk.guard(indent, conds)]
        tx, ty = f"tx_{X}x{Y}", f"ty_{X}x{Y}"
        lines.append(sk.routine_index(inner, tx, ty, "ix" if u is None and V == 1 else f"ix{self.slot(u, v)}"))
        cargs = ["rix"]
        binds = kc.call.bindings()
        declared: dict[str, str] = {}       # view variable -> its struct (an element passed twice)
        fn = kc.call.function
        for a, acc in zip(r.args, _accesses_in_order(s)):
            if a.kind == "global" and fn.grid and fn.param_map[a.name].reach == "neighbours":
                val = binds[a.name]
                if val.id in self.halo:
                    lines += self.halo_view(val, fn, kc.call.text(), inner)
                    cargs.append(f"h_{val.label}")
                else:
                    cargs.append(grids.view_name(val.label, fn.grid, fn.boundary))
            elif a.kind == "global":
                cargs.append(f"g_{binds[a.name].label}")
            elif a.kind == "scalar":
                decls, expr = _scalar_code(binds[a.name], f"kf_{a.name}_")
                lines.extend(inner + d for d in decls)
                cargs.append(expr)
            elif acc is None:
                raise AssertionError(f"{r.fn}: no access for element argument {a.name}")
            elif acc.element in self.pl.registers:
                cargs.append(self.ename(acc.element, u or 0, v))
            else:
                vname = self.view(acc, X, Y)
                var = f"v_{acc.element}"
                if var in declared and declared[var] != vname:      # the same element, another mapping
                    var = f"v_{acc.element}_{len(declared)}"
                if var not in declared:
                    declared[var] = vname
                    lines.append(sk.view_decl(inner, vname, acc.element, tx, ty, var, self.copy_of(acc.element)))
                cargs.append(var)
        lines.append(sk.call_line(inner, r.fn, kc.template_macros, cargs))
        lines.append(f"{indent}}}")
        return lines

    def halo_view(self, val, fn, reader: str, indent: str) -> list[str]:
        """The lines declaring the halo view of ``val`` (made in this kernel) for the stencil ``fn``
        about to read it, its struct defined once (``codegen/halo.py``)."""
        prod = self.halo[val.id]
        self.views.setdefault(halo.struct_name(self.spec.name, val.label),
                              halo.struct_def(self.spec.name, val, fn.grid, fn.boundary, prod, reader))
        decls, inits = halo.initialisers(prod, _scalar_code)
        return ([indent + d for d in decls]
                + [f"{indent}{halo.decl(self.spec.name, val, fn.grid, f'h_{val.label}', inits)}   "
                   f"// {val.name} evaluated around the point: {prod.call.text()}"])

    def copy_of(self, key: str) -> str | None:
        """The pointer to the copy of a two-copy shared element that the serial loop's iteration
        uses (its parity: consecutive iterations alternate), or None for an element of one copy."""
        el = self.lay.elements[key]
        if el.buffers == 1:
            return None
        return f"sh_{key} + (it & 1) * {el.size}"

    def view(self, acc: Access, X: int, Y: int) -> str:
        """The name of the view struct of a shared element under an access (defined once)."""
        el = self.lay.elements[acc.element]
        vname, vdef = sk.view_struct(el.kind, el.shape, el.pitch, acc.mapping, X, Y, self.cluster)
        self.views[vname] = vdef
        return vname

    def clear(self, s: Step, indent: str, u: int | None, v: int = 0) -> list[str]:
        acc = s.accesses[0]
        el = self.lay.elements[acc.element]
        X, Y = acc.threads
        T = self.T
        ident = f"real({el.identity})"
        lines = [f"{indent}// {s.kc.call.name}: clear {el.key} (reduction identity)"]
        if acc.element in self.pl.registers:
            lines.append(f"{indent}#pragma unroll")
            lines.append(f"{indent}for (int k = 0; k < {self.pl.registers[acc.element]}; ++k) "
                         f"{self.ename(acc.element, u or 0, v)}.v[k] = {ident};")
        elif acc.mapping == "any":
            lines.append(f"{indent}for (int e = lt; e < {el.size}; e += {T}) sh_{el.key}[e] = {ident};")
        else:
            vname = self.view(acc, X, Y)
            slots = MAPPINGS[acc.mapping].slots(el.shape, X, Y)
            guard = f"if (lt < {X * Y}) " if X * Y < T else ""
            lines.append(f"{indent}{guard}{{ {vname} v{{sh_{el.key}, tx_{X}x{Y}, ty_{X}x{Y}}}; "
                         f"for (int k = 0; k < {slots}; ++k) v(k) = {ident}; }}")
        return lines

    def step(self, s: Step, indent: str, u: int | None, v: int = 0) -> None:
        if s.barrier and self.cluster > 1:
            self.w(f"{indent}kf_cluster_sync();   // cluster barrier: shared data changes hands across "
                   f"the cluster's {self.cluster} blocks")
        elif s.barrier and self.device:
            self.w(f"{indent}kf_bar_sync({self.fr.threads});   // local barrier of this kernel's threads: shared data "
                   "changes hands")
        elif s.barrier:
            self.w(f"{indent}__syncthreads();   // local barrier: shared data changes hands")
        self.out += self.clear(s, indent, u, v) if s.kind == "clear" else self.routine_call(s, indent, u, v)

    def step_slots(self, s: Step, indent: str, u: int | None) -> None:
        """A step once per span slot when it touches per-slot data, else once."""
        for v in range(1 if s.once_per_span else self.V):
            self.step(s, indent, u, v)

    # -- phases ------------------------------------------------------------------------------
    def wait(self, phase: str) -> None:
        if phase == self.fr.wait_phase:
            self.w("    kf_wait_prior();   // the launch before this one (a clear, a kernel) has finished")

    def phases(self) -> None:
        steps, w = self.lay.steps, self.w
        self.wait("pre")
        if any(s.phase == "pre" for s in steps):
            w("    // ---- before the serial loop: invariant loads, cleared accumulators")
            for s in steps:
                if s.phase == "pre":
                    self.step_slots(s, "    ", None)
            w("")
        self.wait("loop")
        self.loop()
        self.wait("post")
        if any(s.phase == "post" for s in steps):
            w("    // ---- after the serial loop: stores of accumulated outputs")
            for s in steps:
                if s.phase == "post":
                    self.step_slots(s, "    ", None)
        if self.fr.wait_phase is None:
            # launched early after a clear that it does not touch, it still finishes after that
            # clear: a kernel waiting for this one then finds the clear done (a no-op otherwise)
            w("    kf_wait_prior();   // before leaving: the launch before this one has finished")
        if self.cluster > 1:
            w("    kf_cluster_sync();   // no block leaves while its cluster may still read its shared memory")
        w("}")

    def loop(self) -> None:
        U, V, L, w = self.U, self.V, self.L, self.w
        w(f"    // ---- serial loop along {L}: iters instance(s) per {'slot' if self.nest == 1 else 'block'}"
          + (f", {U} at a time" if U > 1 else ""))
        if self.triangle:
            assert U == 1 and V == 1, "a kernel on a triangle walks single tiles: no unrolled or spanned copies"
            w("    for (int it = 0; it < iters; ++it) {")
            w("        const long long kf_t = first_t + it * kf_groups;")
            w("        if (kf_t >= n_tri) break;   // past the last upper tile")
            w("        // tile (I, J) of number kf_t: counted from the last tile, row n_i-1-g starts at g (g + 1) / 2")
            w("        const long long kf_r = n_tri - 1 - kf_t;")
            w("        long long kf_g = (long long)((sqrt(8.0 * (double)kf_r + 1.0) - 1.0) * 0.5);")
            w("        if (kf_g * (kf_g + 1) / 2 > kf_r) --kf_g;   // the root's rounding")
            w("        else if ((kf_g + 1) * (kf_g + 2) / 2 <= kf_r) ++kf_g;")
            w("        KfIx ix_u0 = ix; ix_u0.i = n_i - 1 - kf_g; ix_u0.j = n_i - 1 - (kf_r - kf_g * (kf_g + 1) / 2);")
            for s in self.lay.steps:
                if s.phase == "loop":
                    self.step(s, "        ", 0)
            w("    }")
            return
        if self.strided:
            assert U == 1 and V == 1, "a strip kernel keeps shared data: no unrolled or spanned copies"
            w("    for (int it = 0; it < iters; ++it) {")
            w(f"        if (first_{L} + it * kf_groups >= n_{L}) break;   // past the end")
            w(f"        KfIx ix_u0 = ix; ix_u0.{L} = first_{L} + it * kf_groups;")
            for s in self.lay.steps:
                if s.phase == "loop":
                    self.step(s, "        ", 0)
            w("    }")
            return
        self.out += sk.loop_open(self.nest, U, self.spec.ipb, L)
        for u in range(U):
            if self.nest == 1 or V == 1:
                self.out += sk.unrolled_index(self.nest, U, self.spec.ipb, L, u)
                continue
            for v in range(V):
                w(f"        KfIx ix_u{u}_v{v} = ix_v{v}; ix_u{u}_v{v}.{L} = {self.first_expr} + it + {u};")
                w(f"        const bool act_u{u}_v{v} = act_v{v} && it + {u} < iters && ix_u{u}_v{v}.{L} < {self.count};")
        loop_steps = [s for s in self.lay.steps if s.phase == "loop"]
        if U == 1 and V == 1:
            for s in loop_steps:
                self.step(s, "        ", 0)
        else:
            self.copies(loop_steps)
        w("    }")

    def copies(self, loop_steps: list[Step]) -> None:
        """Loads of every unrolled copy first, then the rest copy by copy: per-slot steps slot by
        slot, between the clears and the stores of the elements the span's slots share (their
        partial results summed over the slots on chip)."""
        for u in range(self.U):
            for s in loop_steps:
                if _is_load(s):
                    self.step_slots(s, "        ", u)
        rest = [s for s in loop_steps if not _is_load(s)]
        for u in range(self.U):
            for s in rest:
                if s.kind == "clear" and s.once_per_span:
                    self.step(s, "        ", u)
            for v in range(self.V):
                for s in rest:
                    if not s.once_per_span:
                        self.step(s, "        ", u, v)
            for s in rest:
                if s.kind != "clear" and s.once_per_span:
                    self.step(s, "        ", u)
