"""Micro-kernels that time one library routine in a simulated fusion environment.

A *probe* is one routine of one variant with its macro values bound (``gemv(A,x)/shfl/BY=8/load_A``).
Its micro-kernel is built on the skeleton of a generated kernel (``codegen/skeleton.py``): the same
thread and instance indices, the same serial loop along ``i`` or ``j`` with ``unroll`` copies
whose loads are issued together, the same register views (``KfReg<N>``) and shared-memory views,
and the routine template called exactly as a kernel calls it -- but only that routine runs.
An *environment* fixes what the surrounding fusion would fix: the loop axis (nested), the
unroll, the instances per block (unnested), and the occupancy (extra shared memory requested at
launch halves the resident blocks, as a fused kernel's shared elements would).

Nothing the routine does may be optimised away:

* loaded registers are folded into an accumulator that is written to ``sink`` only under a
  runtime condition that is never true (``kill`` is 0 at launch);
* the registers a compute or store routine reads change every iteration (the accumulator or the
  iteration number is added), so its work cannot be hoisted out of the loop; elements it reads
  from shared memory are rewritten every iteration;
* outputs of compute routines are folded into the accumulator.

Identical micro-kernels (e.g. ``blas1_load`` for every BLAS-1 input) are one probe: its id is a
hash of the kernel text and of the routine's source file, so the calibration measures it once
and a user library's new routines are the only ones measured again.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import product
from math import prod
from typing import Any

from ..codegen import skeleton as sk
from ..codegen.barrier_check import check_probes
from ..codegen.layout import MAX_SHARED_BYTES
from ..codegen.module import DTYPES, PRELUDE, c_comment
from ..fusion.choices import PREFERRED_IPB
from ..fusion.space import UNROLLS
from ..library.cusource import defining_file
from ..library.mappings import MAPPINGS
from ..library.schema import Function, Library, Routine, Variant
from ..cost.store import function_key, routine_key  # noqa: F401 - function_key: imported from here too

OCCUPANCIES = ("full", "half")      # natural occupancy, and half the resident blocks


@dataclass(frozen=True)
class Env:
    """A simulated fusion environment."""
    loop: str = "i"                 # axis the serial loop walks (nested functions: i or j)
    unroll: int = 1                 # serial iterations whose loads are issued together
    ipb: int = 1                    # instances per block (unnested functions)
    occupancy: str = "full"         # full | half (extra shared memory at launch)
    barrier: bool = False           # a local barrier in every serial iteration (barrier probe)

    @property
    def tag(self) -> str:
        return (f"l{self.loop}_u{self.unroll}_p{self.ipb}_{self.occupancy}" + ("_bar" if self.barrier else ""))

    def to_json(self) -> dict:
        return {"loop": self.loop, "unroll": self.unroll, "ipb": self.ipb, "occupancy": self.occupancy}


def macro_choices(variant: Variant) -> list[tuple[tuple[str, int], ...]]:
    names = list(variant.macros)
    return [tuple(zip(names, vals)) for vals in product(*(variant.macros[n] for n in names))] or [()]


def _value(x: str | int, macros: dict[str, int]) -> int:
    return x if isinstance(x, int) else macros[x]


@dataclass(frozen=True)
class _ElementArg:
    name: str
    mode: str
    mapping: str
    kind: str                       # scalar | subvector | tile
    shape: tuple[int, ...]
    pad: int
    registers: int                  # slots per thread when in registers; 0: shared memory


@dataclass(frozen=True)
class Probe:
    """One routine with macros bound; emits its micro-kernel for any environment."""
    id: str
    kind: str                       # load | compute | store
    nesting: int
    threads: int                    # per instance (the variant's, the routine may use fewer)
    shape: tuple[int, int]          # the routine's threads X, Y
    fn: str                         # C++ template
    macros: tuple[tuple[str, int], ...]
    args: tuple[tuple[str, Any], ...]    # ("global", (name, type, axis)) | ("scalar", name) | ("element", _ElementArg)
    source: str                     # path of the .cu file that defines the routine
    ipbs: tuple[int, ...]           # instances per block to calibrate (unnested)
    atomic: bool                    # a store accumulating a reduced output into global memory
    tile: tuple[int, int] | None = None     # nested: rows x columns of an instance
    files: tuple[str, ...] = ()     # every routine file of its variant (a module includes them all)

    # -- environments -------------------------------------------------------------------
    def environments(self, quick: bool = False) -> list[Env]:
        loops = ("i", "j") if self.nesting == 2 else ("i",)
        unrolls: tuple[int, ...] = (1, max(UNROLLS)) if quick else UNROLLS
        if self.uses_shared:
            unrolls = (1,)          # the builder unrolls only kernels with every element in registers
        out = []
        for loop, ipb in product(loops, self.ipbs):
            out += [Env(loop, u, ipb) for u in unrolls]
            out.append(Env(loop, 1, ipb, "half"))
        return out

    @property
    def uses_shared(self) -> bool:
        return any(kind == "element" and not a.registers for kind, a in self.args)

    def shared_entries(self) -> int:
        return sum(_size(a) for kind, a in self.args if kind == "element" and not a.registers)

    # -- CUDA ------------------------------------------------------------------------------
    def kernel_name(self, env: Env) -> str:
        return f"kfc_{self.id}_{env.tag}"

    def globals(self) -> list[tuple[str, str, str]]:
        """(name, type, axis) of each global-memory argument, in order."""
        return [a for kind, a in self.args if kind == "global"]

    def scalars(self) -> list[str]:
        return [a for kind, a in self.args if kind == "scalar"]

    def kernel(self, env: Env) -> tuple[str, list[str]]:
        """(the __global__ function, shared-view struct definitions it needs)."""
        k = _ProbeKernel(self, env)
        k.head()
        k.prologue()
        k.loop()
        k.w("    if (kill) sink[0] = kf_acc;   // never true: keeps every load and compute alive")
        k.w("}")
        return "\n".join(k.out), list(k.views.values())


class _ProbeKernel:
    """The text of one probe's micro-kernel in one environment, built on the kernel skeleton
    (``codegen/skeleton.py``) that generated kernels use."""

    def __init__(self, probe: Probe, env: Env):
        self.p, self.env = probe, env
        self.T, self.ipb, self.U, self.L = probe.threads, env.ipb, env.unroll, env.loop
        self.X, self.Y = probe.shape
        self.nest = probe.nesting
        self.elems = [a for kind, a in probe.args if kind == "element"]
        self.out: list[str] = []
        self.views: dict[str, str] = {}

    def w(self, line: str) -> None:
        self.out.append(line)

    def head(self) -> None:
        p, env = self.p, self.env
        params = []
        for name, typ, _axis in p.globals():
            params += sk.array_params(name, typ)
        params += [f"real s_{s}" for s in p.scalars()]
        params += ["long long n_i"] + (["long long n_j"] if self.nest == 2 else [])
        params += ["int iters", "int kill", "real* __restrict__ sink"]
        self.w(f"// probe {p.id}: {p.fn}{sk.template_args(p.macros)} ({p.kind}); loop {self.L}, unroll {self.U}, "
               f"{self.ipb} instance(s) per block, occupancy {env.occupancy}"
               + (", barrier every iteration" if env.barrier else ""))
        self.out += sk.kernel_open(p.kernel_name(env), self.T * self.ipb, params, p.shared_entries() * self.ipb)
        for name, typ, _axis in p.globals():
            self.w(sk.global_view(name, typ, notes=False))

    def prologue(self) -> None:
        """Indices, the accumulator, the elements (inputs filled), a barrier after the fills."""
        p, w, L, U = self.p, self.w, self.L, self.U
        if self.nest == 1:
            self.out += sk.unnested_indices(self.T, self.ipb, "(long long)blockIdx.x", notes=False)
        else:
            other = "j" if L == "i" else "i"
            w(sk.nested_thread(notes=False))
            w(f"    const long long first_{L} = (long long)(blockIdx.x / n_{other}) * iters;")
            w(f"    const long long blk_{other} = (long long)(blockIdx.x % n_{other});")
            w(sk.nested_index(L))
        w(sk.thread_coords("tx", "ty", self.X))
        w("    real kf_acc = 0;")
        offset = 0
        for a in self.elems:
            if a.registers:
                for u in range(U):
                    init = "{}" if p.kind == "load" or a.mode != "r" else ""
                    w(sk.register_decl(a.registers, f"e_{a.name}_u{u}", f"{a.kind} {a.name}", init))
                    if p.kind != "load" and a.mode == "r":
                        w(f"    for (int k = 0; k < {a.registers}; ++k) e_{a.name}_u{u}.v[k] = real(lt % 7 + k + {u});")
            else:
                stride = p.shared_entries() if self.ipb > 1 else None
                w(sk.shared_decl(a.name, offset, stride, f"{a.kind} {a.name}"))
                w(f"    for (int e = lt; e < {_size(a)}; e += {self.T}) sh_{a.name}[e] = real(e % 5);")
                offset += _size(a)
        if p.shared_entries() * self.ipb:
            w("    __syncthreads();")

    def loop(self) -> None:
        """The serial loop: the routine in every unrolled copy, then (loads) what they brought."""
        nest, U, ipb, L, w = self.nest, self.U, self.ipb, self.L, self.w
        self.out += sk.loop_open(nest, U, ipb, L, notes=False)
        if self.env.barrier:
            w("        __syncthreads();   // the barrier probe: one local barrier per iteration")
        for u in range(U):
            self.out += sk.unrolled_index(nest, U, ipb, L, u)
        for u in range(U):
            self.call(u)
        if self.p.kind == "load":       # fold what the loads brought, after all of them were issued
            for u in range(U):
                for a in self.elems:
                    w(self.fold(a, u, "        "))
        w("    }")

    def fold(self, a: _ElementArg, u: int, indent: str) -> str:
        """Add an element's entries to the accumulator."""
        if a.registers:
            return f"{indent}for (int k = 0; k < {a.registers}; ++k) kf_acc += e_{a.name}_u{u}.v[k];"
        return f"{indent}kf_acc += sh_{a.name}[lt % {_size(a)}];"

    def call(self, u: int) -> None:
        """Unrolled copy u: inputs changed, the routine called, outputs folded (computes)."""
        p, w, X, Y = self.p, self.w, self.X, self.Y
        guarded = self.nest == 1 or self.U > 1
        conds = ([f"act_u{u}"] if guarded else []) + ([f"lt < {X * Y}"] if X * Y < self.T else [])
        inner = "            "
        w(sk.guard("        ", conds))
        if p.kind != "load":        # inputs that must change every iteration
            step = "kf_acc" if p.kind == "compute" else f"real(it + {u})"
            for a in self.elems:
                if a.mode != "r":
                    continue
                if a.registers:
                    w(f"{inner}for (int k = 0; k < {a.registers}; ++k) e_{a.name}_u{u}.v[k] += {step};")
                else:
                    w(f"{inner}sh_{a.name}[lt % {_size(a)}] = {step};")
        w(sk.routine_index(inner, "tx", "ty", f"ix_u{u}"))
        cargs = ["rix"]
        for kind, a in p.args:
            if kind == "global":
                cargs.append(f"g_{a[0]}")
            elif kind == "scalar":
                cargs.append(f"s_{a}")
            elif a.registers:
                cargs.append(f"e_{a.name}_u{u}")
            else:
                vname, vdef = sk.view_struct(a.kind, a.shape, _pitch(a), a.mapping, X, Y)
                self.views[vname] = vdef
                w(sk.view_decl(inner, vname, a.name, "tx", "ty"))
                cargs.append(f"v_{a.name}")
        w(sk.call_line(inner, p.fn, p.macros, cargs))
        if p.kind == "compute":
            for a in self.elems:
                if a.mode != "r":
                    w(self.fold(a, u, inner))
        w("        }")


def _size(a: _ElementArg) -> int:
    if a.kind == "tile":
        return a.shape[0] * _pitch(a)
    return prod(a.shape) if a.shape else 1


def _pitch(a: _ElementArg) -> int:
    return a.shape[1] + a.pad if a.kind == "tile" else 0


def _probe(lib: Library, fn: Function, var: Variant, macros: tuple, r: Routine) -> Probe:
    m = dict(macros)
    tile = var.tile_shape(m, lib.tile) if fn.nesting == 2 else None
    X, Y = (_value(t, m) for t in r.threads)
    T = prod(_value(t, m) for t in var.threads)
    params = {p.name: p for p in fn.params}
    locals_ = {loc.name: loc for loc in var.locals}
    args: list[tuple[str, object]] = []
    for n, a in enumerate(r.args):      # positional names: equal routines give equal kernels
        if a.kind == "global":
            p = params[a.name]
            axis = p.index[0] if p.type == "vector" else ""
            args.append(("global", (f"g{n}", p.type, axis)))
        elif a.kind == "scalar":
            args.append(("scalar", f"a{n}"))
        else:
            if a.name in params:
                p = params[a.name]
                kind, shape, pad = p.element, lib.element_shape(p.element, tile, p.index), p.pad
            else:
                loc = locals_[a.name]
                kind, shape, pad = loc.element, tuple(_value(x, m) for x in loc.shape), loc.pad
            assert a.mode is not None and a.mapping is not None      # the loader checked element arguments
            mp = MAPPINGS[a.mapping]
            regs = mp.slots(shape, X, Y) if mp.registers and a.mapping != "any" else 0
            args.append(("element", _ElementArg(f"e{n}", a.mode, a.mapping, kind, shape, pad, regs)))
    if fn.nesting == 1:
        allowed = var.instances_per_block
        ipbs = tuple(p for p in PREFERRED_IPB if p in allowed) or (max(allowed),)
    else:
        ipbs = (1,)
    atomic = r.kind == "store" and r.param is not None and bool(params[r.param].reduce)
    kind = "compute" if r.kind == "finish" else r.kind      # a finish works on chip, as a compute
    text = repr((kind, fn.nesting, T, (X, Y), r.fn, macros, args, ipbs, atomic)
                + ((tile,) if tile not in (None, tuple(lib.tile)) else ()))
    source = defining_file(lib, var.files, r.fn)      # a routine shared by two variants is measured once
    h = hashlib.sha256(text.encode() + b"\0" + lib.source_text(source).encode())
    return Probe(h.hexdigest()[:12], kind, fn.nesting, T, (X, Y), r.fn, macros, tuple(args),
                 str(source), ipbs, atomic, tile, tuple(str(f) for f in var.files))


def library_probes(lib: Library) -> tuple[dict[str, str], dict[str, Probe]]:
    """(routine key -> probe id, probe id -> probe) for every routine of every function, variant
    and macro value of a library -- but the cluster variants' and the vector variants on the rows
    of strips': a probe runs its routine in blocks of their own, a cluster's routines read the
    other blocks' shared memory, and a vector call on strips runs only beside a matrix call
    (their kernels are priced by the transfer model, cost/calibrated.py).  Functions reading a
    csr matrix (a sparse mat-vec) have none either: what their routines cost depends on the
    matrix's row lengths and the gather's locality, which no fixed micro-kernel stands for; nor
    have the stencils' compute routines: they read a grid view whose extents a probe does not
    have.  Kernels of either are priced by the transfer model too."""
    routines: dict[str, str] = {}
    probes: dict[str, Probe] = {}
    for fn in lib.functions:
        if any(p.type == "csr" for p in fn.params):
            continue
        for var in fn.variants:
            if var.cluster or (var.whole and fn.nesting == 1):
                continue
            for macros in macro_choices(var):
                for r in var.routines:
                    if fn.grid and r.kind == "compute":
                        continue
                    p = _probe(lib, fn, var, macros, r)
                    if p.shared_entries() * max(p.ipbs) * 8 > MAX_SHARED_BYTES:
                        continue        # no kernel can hold it (the builder refuses it too)
                    if any(MAPPINGS[a.mapping].check(a.shape, *p.shape) for kind, a in p.args if kind == "element"):
                        continue        # a mapping its element cannot take (the builder refuses it too)
                    probes.setdefault(p.id, p)
                    routines[routine_key(fn, var, macros, r)] = p.id
    return routines, probes


def barrier_probes(probes: dict[str, Probe]) -> list[tuple[int, int, Probe, Env]]:
    """(nesting, threads per block, probe, environment) the barrier cost is measured with: per
    nesting depth and block size, a load probe with every element in registers (a barrier costs
    what it takes from the loads' overlap, which depends on the block size)."""
    out: dict[tuple[int, int], tuple[Probe, Env]] = {}
    for p in sorted(probes.values(), key=lambda p: p.id):
        if p.kind != "load" or p.uses_shared:
            continue
        for ipb in p.ipbs:
            out.setdefault((p.nesting, p.threads * ipb), (p, Env("i", 1, ipb)))
    return [(nest, threads, p, env) for (nest, threads), (p, env) in sorted(out.items())]


EMPTY_KERNEL = 'extern "C" __global__ void kfc_empty(int kill, real* sink) { if (kill) sink[0] = real(1); }'


def probe_module(lib: Library, dtype: str, kernels: list[tuple[Probe, Env]], title: str = "",
                 empty: bool = False) -> str:
    """A complete CUDA module holding the micro-kernels of (probe, environment) pairs; the
    routines they call are checked for barriers first (``barrier_check.check_probes``)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    check_probes(lib, dtype, [p for p, _ in kernels])
    parts = [
        "// Generated by kfuse calibrate -- routine micro-kernels.",
        *(f"// {line}" for line in title.splitlines()),
        f"// library {lib.name} v{lib.version} ({lib.digest}), element type {dtype}",
        f"typedef {DTYPES[dtype]} real;",
        f"#define KF_SUB {lib.subvector}",
        f"#define KF_TR {lib.tile[0]}",
        f"#define KF_TC {lib.tile[1]}",
        PRELUDE.read_text(),
    ]
    for src in dict.fromkeys(f for p, _ in kernels for f in (p.files or (p.source,))):
        parts += [f"// ---- library routines: {c_comment(src)}", lib.source_text(src)]
    bodies, views = [], {}
    for p, env in kernels:
        body, vs = p.kernel(env)
        bodies.append(body)
        views.update(dict.fromkeys(vs))
    parts += list(views)
    if empty:
        parts.append(EMPTY_KERNEL)
    parts += ["", *bodies]
    return "\n".join(parts) + "\n"
