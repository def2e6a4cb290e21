"""The kernel skeleton: CUDA text that generated kernels (``emit.py``) and the calibration's
micro-kernels (``calibration/probes.py``) share, so that a probe times a routine in exactly the
frame a fused kernel calls it in.

Shared: the kernel's head and parameters, the global-memory views, the thread and instance
indices of an unnested kernel, the instance index of a nested one, the serial loop over
instances with its unrolled copies' indices and activity flags, the declarations of elements in
registers and shared memory, the shared-memory view structs, and a routine call (its thread
guard, its index, its views and the call itself).  ``notes`` adds the explanatory comments that
generated kernels carry (the probes' text has none).
"""
from __future__ import annotations

from ..library.mappings import MAPPINGS

_DIMS = {"vector": ("n",), "matrix": ("rows", "cols"), "scalar": (), "csr": ("rows", "cols", "nnz")}
# a csr matrix's parameters after its values and sizes: index width, the row mapping chosen at
# bind time and the sums of its long rows made before the kernel (runtime/csr.py), in this order
CSR_META = ("int {n}_wide", "int {n}_lanes", "long long {n}_long", "const real* __restrict__ {n}_lsum")


def array_params(name: str, typ: str) -> list[str]:
    """Kernel parameters of a global array: its pointer and its dimensions (a csr matrix: its
    row pointers, column indices, values, sizes and ``CSR_META``)."""
    if typ == "csr":
        return ([f"const void* __restrict__ {name}_ptr", f"const void* __restrict__ {name}_idx",
                 f"real* __restrict__ {name}_p"] + [f"long long {name}_{n}" for n in _DIMS[typ]]
                + [m.format(n=name) for m in CSR_META])
    return [f"real* __restrict__ {name}_p"] + [f"long long {name}_{n}" for n in _DIMS[typ]]


def kernel_open(name: str, threads: int, params: list[str], smem: int, cluster: int = 1,
                resident: int = 0) -> list[str]:
    """The __global__ function's head up to its opening brace, and its shared-memory array
    (``cluster``: blocks per thread-block cluster, compiled in; ``resident``: threads a
    multiprocessor should hold at once, 0: the compiler's choice)."""
    dims = f" __cluster_dims__({cluster}, 1, 1)" if cluster > 1 else ""
    blocks = f", {resident // threads}" if resident >= 2 * threads else ""
    lines = [f'extern "C" __global__ void __launch_bounds__({threads}{blocks}){dims}',
             f"{name}(" + ",\n    ".join(params) + ")", "{"]
    if smem:
        lines.append(f"    __shared__ real kf_smem[{smem}];")
    return lines


def device_open(name: str, params: list[str]) -> list[str]:
    """A kernel's parameters as a struct (``<name>_args``, in the kernel's order: the argument
    block of its launch) and the head of its body as a device function of one block, up to its
    opening brace and the parameters' names taken from the struct (``emit.render_device``)."""
    def member(p: str) -> str:
        return p.replace("__restrict__ ", "")
    lines = [f"struct {name}_args {{   // {name}'s parameters, in its order"]
    lines += [f"    {member(p)};" for p in params]
    lines += ["};",
              f"KF_DEVICE void {name}_dev(const {name}_args& kf_a, long long kf_blk, long long kf_nblk, real* kf_smem)",
              "{"]
    lines += [f"    {p} = kf_a.{p.split()[-1]};" for p in params]
    return lines


def global_view(name: str, typ: str, notes: bool = True) -> str:
    """The view (``KfMat``, ``KfVec``) of a global array argument."""
    if typ == "matrix":
        return f"    const KfMat g_{name}{{{name}_p, {name}_rows, {name}_cols}};"
    if typ == "csr":
        return (f"    const KfCsr g_{name}{{{name}_ptr, {name}_idx, {name}_p, {name}_rows, {name}_cols, {name}_nnz, "
                f"{name}_wide, {name}_lanes, {name}_long, {name}_lsum}};")
    if typ == "vector":
        return f"    const KfVec g_{name}{{{name}_p, {name}_n}};"
    return f"    const KfVec g_{name}{{{name}_p, 1}};" + ("   // scalar result" if notes else "")


def unnested_indices(T: int, ipb: int, block: str, notes: bool = True, thread: str = "threadIdx.x") -> list[str]:
    """Thread in its instance (``lt``), instance slot in the block (``inst``), the block's first
    instance and the instance index ``ix`` of an unnested kernel (``block``: the block number;
    ``thread``: the thread's number in the block)."""
    return [f"    const int lt = {thread} % {T};" + ("            // thread in its instance" if notes else ""),
            f"    const int inst = {thread} / {T};" + ("          // instance slot in the block" if notes else ""),
            f"    const long long first_i = {block} * iters * {ipb};",
            "    KfIx ix{lt, 0, first_i + inst, 0};"]


def nested_thread(notes: bool = True) -> str:
    """The thread in the instance of a nested kernel (one instance per block)."""
    return "    const int lt = threadIdx.x;" + ("                  // thread in the instance" if notes else "")


def nested_index(L: str) -> str:
    """The instance index of a nested kernel from the block's first instance along the loop
    axis ``L`` (``first_<L>``) and its place across it (``blk_<other>``)."""
    return f"    KfIx ix{{lt, 0, {'first_i' if L == 'i' else 'blk_i'}, {'blk_j' if L == 'i' else 'first_j'}}};"


def loop_bounds(nest: int, L: str) -> tuple[str, str]:
    """(the block's first instance along the loop, the instance count along it)."""
    return ("first_i", "n_i") if nest == 1 else (f"first_{L}", f"n_{L}")


def thread_coords(tx: str, ty: str, X: int) -> str:
    """A routine's thread coordinates for X columns of threads."""
    return f"    const int {tx} = lt % {X}, {ty} = lt / {X};"


def loop_open(nest: int, U: int, ipb: int, L: str, notes: bool = True) -> list[str]:
    """The serial loop over instances, ``U`` at a time, left when the whole block is past the end."""
    first, count = loop_bounds(nest, L)
    block_first = f"{first} + (long long)it * {ipb}" if nest == 1 else f"{first} + it"
    return [f"    for (int it = 0; it < iters; it += {U}) {{",
            f"        if ({block_first} >= {count}) break;" + ("   // the whole block is past the end" if notes else "")]


def unrolled_index(nest: int, U: int, ipb: int, L: str, u: int) -> list[str]:
    """Instance index ``ix_u<u>`` of unrolled copy ``u`` and its activity flag ``act_u<u>``
    (nested kernels without unrolling need none: the loop's break guards the only copy)."""
    first, count = loop_bounds(nest, L)
    if nest == 1:
        return [f"        KfIx ix_u{u} = ix; ix_u{u}.i = {first} + (long long)(it + {u}) * {ipb} + inst;",
                f"        const bool act_u{u} = it + {u} < iters && ix_u{u}.i < n_i;"]
    lines = [f"        KfIx ix_u{u} = ix; ix_u{u}.{L} = {first} + it + {u};"]
    if U > 1:
        lines.append(f"        const bool act_u{u} = it + {u} < iters && ix_u{u}.{L} < {count};")
    return lines


def register_decl(slots: int, name: str, desc: str, init: str = "") -> str:
    return f"    KfReg<{slots}> {name}{init};   // {desc}: registers"


def shared_decl(key: str, offset: int, stride: int | None, desc: str) -> str:
    """A shared element's pointer into ``kf_smem`` (``stride``: entries per instance slot, None
    for one instance per block)."""
    base = f"kf_smem + {offset}" + (f" + inst * {stride}" if stride is not None else "")
    return f"    real* const sh_{key} = {base};   // {desc}: shared"


def guard(indent: str, conds: list[str]) -> str:
    """The opening of a block run only where every condition holds."""
    return f"{indent}if ({' && '.join(conds)}) {{" if conds else f"{indent}{{"


def routine_index(indent: str, tx: str, ty: str, ix: str) -> str:
    """The index a routine is called with: its thread coordinates and its instance."""
    return f"{indent}const KfIx rix{{{tx}, {ty}, {ix}.i, {ix}.j}};"


def view_decl(indent: str, vname: str, key: str, tx: str, ty: str, var: str | None = None,
              base: str | None = None) -> str:
    """A routine argument's view of a shared element (the variable ``v_<key>`` unless named;
    ``base``: the pointer to view, default the element's ``sh_<key>``)."""
    comment = "   // this iteration's copy (consecutive iterations alternate copies)" if base else ""
    return f"{indent}{vname} {var or 'v_' + key}{{{base or 'sh_' + key}, {tx}, {ty}}};{comment}"


def template_args(macros: tuple[tuple[str, int], ...]) -> str:
    return f"<{', '.join(str(v) for _, v in macros)}>" if macros else ""


def call_line(indent: str, fn: str, macros: tuple[tuple[str, int], ...], cargs: list[str]) -> str:
    return f"{indent}{fn}{template_args(macros)}({', '.join(cargs)});"


def view_struct(kind: str, shape: tuple[int, ...], pitch: int, mapping: str, X: int, Y: int,
                cluster: int = 1) -> tuple[str, str]:
    """(type name, definition) of a shared-memory view of an element (``kind`` scalar, subvector
    or tile of ``shape``, tile rows ``pitch`` entries apart) under a mapping for X x Y threads;
    in a kernel of clusters of ``cluster`` blocks, each block holds a copy (``blocks``: what the
    cluster routines read the others' copies through, kf_cluster_get)."""
    dims = "x".join(map(str, shape)) or "1"
    name = f"KfSh_{kind}{dims}" + (f"p{pitch}" if kind == "tile" else "") + f"_{mapping}"
    if mapping != "any":
        name += f"_{X}x{Y}"
    if cluster > 1:
        name += f"_c{cluster}"
    lines = [f"struct {name} {{   // {kind} {dims} in shared memory, mapping {mapping}"
             + (f" for {X}x{Y} threads" if mapping != "any" else "")
             + (f", a copy in each of a cluster's {cluster} blocks" if cluster > 1 else "")]
    lines.append("    real* p; int tx, ty;")
    lines.append(f"    static constexpr int slots = {MAPPINGS[mapping].slots(shape, X, Y)};")
    if cluster > 1:
        lines.append(f"    static constexpr int blocks = {cluster};")
    off = MAPPINGS[mapping].offset(shape, pitch, X, Y)
    if off is not None:
        lines.append(f"    KF_DEVICE real& operator()(int k) const {{ return p[{off}]; }}")
    if kind == "tile":
        lines.append(f"    KF_DEVICE real& at(int r, int c) const {{ return p[r * {pitch} + c]; }}")
    elif kind == "subvector":
        lines.append("    KF_DEVICE real& at(int e) const { return p[e]; }")
    else:
        lines.append("    KF_DEVICE real& at() const { return p[0]; }")
    lines.append("};")
    return name, "\n".join(lines)
