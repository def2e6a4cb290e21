"""Row-block partitioning of a script over P ranks: the per-rank plan of local sub-scripts and
collectives.

Every matrix is split by row blocks (instance axis ``i``, the matrix's first dimension) over the
ranks; the columns stay whole.  A call over a matrix therefore runs its ``i`` axis split and its
``j`` axis whole: a vector parameter along ``i`` is read as the rank's block, one along ``j`` whole
(replicated); an output along ``i`` is the rank's block, one reduced over ``i`` (``gemtv``, ``dot``
over split vectors) is a *partial* sum, all-reduced before anything reads it.  A call over vectors
only (BLAS-1) runs split when any of its vector arguments is split (a replicated argument is then
read as its block: a view, no communication) and replicated (computed whole on every rank)
otherwise.  A replicated value needed split is sliced; a split one needed whole is all-gathered.

A call that reduces over ``i`` and adds a term along ``j`` (``gemtv(b, A, y, 1, z)``) would add the
term once per rank: it is rewritten as the overload without the term (a partial sum), all-reduced,
and ``axpy`` adding the term once.

Calls are grouped into *phases*: a call runs in the first phase after every collective or slice its
arguments need, so local segments are as large as the data flow allows and the collectives between
two phases are batched.  Each local segment is a ``.kf`` script over local blocks (sizes ``n`` whole,
``n_blk`` the rank's block), planned and fused by ``kfuse.compile`` like any script.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from ..errors import KfuseError
from ..ir.program import Program, ScalarArg, Value
from ..library.schema import Function, Library

SPLIT, REP, PARTIAL = "split", "rep", "partial"


@dataclass(frozen=True)
class Local:
    """A local segment: a script every rank runs on its own blocks."""
    text: str
    inputs: tuple[str, ...]            # local names read (arrays and scalars)
    outputs: tuple[str, ...]           # local names returned, in the script's return order
    scalar_inputs: tuple[str, ...]     # the scalar inputs computed by earlier segments (device scalars)


@dataclass(frozen=True)
class Collective:
    """``all_reduce``: sum each name over the ranks, in place (result replicated).
    ``all_gather``: each ``(block, whole, dim)``: the whole vector ``whole`` from every rank's
    ``block`` along dimension ``dim``.  ``slice``: each ``(whole, block, dim)``: the rank's block of
    a replicated value (a view; no communication)."""
    op: str                                         # all_reduce | all_gather | slice
    items: tuple[tuple[str, str, int | None], ...]  # (source, result, dim); all_reduce: same name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r for _, r, _ in self.items)


Segment = Local | Collective


@dataclass(frozen=True)
class Placement:
    """Where a script-level input or output lives on the ranks."""
    name: str              # the script's name
    local: str             # the local name in the segments
    type: str              # scalar | vector | matrix
    layout: str            # split (rank's row block of ``dim``) | rep (whole on every rank)
    dim: int | None        # the split dimension (rows of a matrix), or None
    dims: tuple[int, ...]  # the value's dimension ids


@dataclass(frozen=True)
class Partitioned:
    program: Program
    world_size: int
    row_block: int
    segments: tuple[Segment, ...]
    inputs: tuple[Placement, ...]
    outputs: tuple[Placement, ...]
    dim_names: dict[int, str] = field(compare=False)      # dim id -> whole-size name in local scripts

    @property
    def locals(self) -> tuple[Local, ...]:
        return tuple(s for s in self.segments if isinstance(s, Local))

    @property
    def collectives(self) -> tuple[Collective, ...]:
        return tuple(s for s in self.segments if isinstance(s, Collective) and s.op != "slice")

    def split_dims(self) -> frozenset[int]:
        return frozenset(p.dim for p in self.inputs + self.outputs if p.dim is not None)

    def rows(self, dim: int, n: int) -> list[tuple[int, int]]:
        """Each rank's rows [start, stop) of dimension ``dim`` of size ``n``."""
        return row_ranges(n, self.world_size, self.row_block, self.dim_names.get(dim, f"d{dim}"))

    def describe(self) -> str:
        out = [f"# {self.program.name} over {self.world_size} rank(s), row blocks of {self.row_block}"]
        for p in self.inputs:
            out.append(f"# input {p.name}: {p.layout}")
        for s in self.segments:
            if isinstance(s, Local):
                out.append("--- local\n" + s.text)
            else:
                out.append(f"--- {s.op}: " + ", ".join(f"{a}->{b}" if a != b else b for a, b, _ in s.items))
        for p in self.outputs:
            out.append(f"# output {p.name} ({p.local}): {p.layout}")
        return "\n".join(out)


def row_ranges(n: int, ranks: int, row_block: int, what: str = "the rows") -> list[tuple[int, int]]:
    """Balanced row blocks: ``ceil(n / row_block)`` blocks of ``row_block`` rows (the last maybe
    shorter) dealt out contiguously, the ranks' block counts differing by at most one."""
    if ranks < 1 or row_block < 1:
        raise KfuseError(f"world size and row block must be positive (got {ranks}, {row_block})")
    blocks = math.ceil(n / row_block)
    if blocks < ranks:
        raise KfuseError(f"{what} = {n} makes {blocks} row block(s) of {row_block}: fewer than the "
                         f"{ranks} ranks (every rank needs at least one block); use fewer ranks or a "
                         f"smaller row_block")
    return [(min(n, r * blocks // ranks * row_block), min(n, (r + 1) * blocks // ranks * row_block))
            for r in range(ranks)]


@dataclass
class _Step:
    fn: Function
    args: tuple[Value | ScalarArg, ...]
    outputs: tuple[Value, ...]
    line: int
    mode: str | None = None           # nesting-1 calls: split | rep; None: decided by the arguments
    phase: int = 0


def _forms(fn: Function, mode: str) -> list[str | None]:
    """The form each input parameter is read in (None: a scalar)."""
    out: list[str | None] = []
    for p in fn.inputs:
        if p.type == "scalar":
            out.append(None)
        elif p.type == "matrix" or (p.follows("i") and mode == SPLIT):
            out.append(SPLIT)
        else:
            out.append(REP)
    return out


def partition(program: Program, library: Library, world_size: int, row_block: int | None = None) -> Partitioned:
    """The per-rank plan of ``program`` over ``world_size`` ranks (see the module's doc)."""
    if world_size < 1:
        raise KfuseError(f"world_size must be at least 1, got {world_size}")
    if program.returned_arithmetic():
        raise KfuseError(f"{program.name} returns scalar arithmetic ({program.returned_arithmetic()[0].text(60)}); "
                         "a script run over several GPUs returns values its calls compute")
    rb = library.tile[0] if row_block is None else row_block
    if rb < 1:
        raise KfuseError(f"row_block must be positive, got {row_block}")
    steps = _steps(program, library)
    native = _layouts(program, steps)
    _phases(steps, native)
    names = _Names(program, [v.label for s in steps for v in s.outputs])
    segments = _segments(program, steps, native, names)
    inputs = tuple(Placement(v.name, v.label, v.type, native[v.id], v.dims[0] if native[v.id] == SPLIT else None,
                             v.dims) for v in program.inputs)
    outputs = tuple(Placement(v.name, v.label, v.type, REP if native[v.id] == PARTIAL else native[v.id],
                              v.dims[0] if native[v.id] == SPLIT else None, v.dims) for v in program.outputs)
    return Partitioned(program, world_size, rb, tuple(segments), inputs, outputs, names.dims)


# -- calls to steps ---------------------------------------------------------------------------
def _steps(program: Program, lib: Library) -> list[_Step]:
    live = {v.id for v in program.outputs}
    kept: list[_Step] = []
    for c in reversed(program.calls):            # dead calls (nothing returned reads them) dropped
        if not any(v.id in live for v in c.outputs):
            continue
        for a in c.args:
            for v in (a.values() if isinstance(a, ScalarArg) else (a,)):
                live.add(v.id)
        kept.append(_Step(c.function, c.args, c.outputs, c.line))
    kept.reverse()
    out: list[_Step] = []
    next_id = len(program.values)
    taken = {v.label for v in program.values}
    for s in kept:
        fn = s.fn
        where = f"line {s.line}: {fn.name}"
        if fn.triangle:     # a row block of a triangle is no triangle: its tiles cross the diagonal
            raise KfuseError(f"{where} reads the {fn.triangle} triangle of a square matrix; a block of its "
                             "rows cannot be split off (use gemv on the full matrix)")
        for p in fn.params:
            if p.type == "matrix" and p.index != ("i", "j"):
                raise KfuseError(f"{where}: matrix {p.name} is indexed {p.index}; only matrices indexed "
                                 "(i, j) can be split by row blocks")
            if p.reduce is not None and p.reduce != "sum":
                raise KfuseError(f"{where}: output {p.name} reduces with {p.reduce!r}; only sums can be "
                                 "all-reduced")
        if fn.nesting == 1:
            out.append(s)
            continue
        reduced_i = [p for p in fn.outputs if not p.follows("i")]
        extra = [p for p in fn.inputs if p.type == "vector" and not p.follows("i")]
        if not reduced_i or not extra:
            out.append(s)
            continue
        # reduces over the split rows and adds a term along j: partial sum, then the term once
        part_step, add_step = _split_term(s, lib, extra, next_id, taken)
        next_id += 1
        out += [part_step, add_step]
    return out


def _split_term(s: _Step, lib: Library, extra, next_id: int, taken: set[str]) -> tuple[_Step, _Step]:
    fn = s.fn
    where = f"line {s.line}: {fn.name}"
    if len(extra) != 1 or len(fn.outputs) != 1:
        raise KfuseError(f"{where}: reduces over the split rows and adds terms along the columns; "
                         "cannot partition it")
    y = extra[0]
    bind = dict(zip((p.name for p in fn.inputs), s.args))
    for short in lib.overloads(fn.name):
        names = [p.name for p in short.inputs]
        if short.reference is None or fn.reference is None or y.name in names:
            continue
        m = re.fullmatch(re.escape(short.reference) + r" \+ (\w+) \* " + re.escape(y.name), fn.reference)
        coef = m.group(1) if m else None
        if coef is None or coef in names or not all(n in bind for n in names):
            continue
        axpy = next((f for f in lib.overloads("axpy") if f.reference == "alpha * x + y"), None)
        if axpy is None:
            break
        out = s.outputs[0]
        label, k = f"{out.label}_part", 2
        while label in taken:
            label, k = f"{out.label}_part{k}", k + 1
        taken.add(label)
        part = Value(next_id, label, label, out.type, out.dims)
        term = bind[coef]
        assert isinstance(term, ScalarArg)
        return (_Step(short, tuple(bind[n] for n in names), (part,), s.line),
                _Step(axpy, (term, bind[y.name], part), (out,), s.line, mode=REP))
    raise KfuseError(f"{where}: reduces over the split rows and adds {y.name} along the columns, and the "
                     "library has no overload without the term (and axpy) to add it once; cannot partition it")


# -- layouts ----------------------------------------------------------------------------------
def _layouts(program: Program, steps: list[_Step]) -> dict[int, str]:
    """The native layout of every value: inputs replicated when some call reads them whole."""
    whole: set[int] = set()
    for s in steps:
        if s.fn.nesting == 2 or s.mode == REP:
            for a, f in zip(s.args, _forms(s.fn, s.mode or SPLIT)):
                if f == REP and isinstance(a, Value):
                    whole.add(a.id)
    native: dict[int, str] = {}
    for v in program.inputs:
        native[v.id] = SPLIT if v.type == "matrix" or (v.type == "vector" and v.id not in whole) else REP
    for s in steps:
        if s.mode is None and s.fn.nesting == 1:
            s.mode = SPLIT if any(isinstance(a, Value) and native[a.id] == SPLIT for a in s.args) else REP
        mode = s.mode or SPLIT
        for p, v in zip(s.fn.outputs, s.outputs):
            if mode == REP:
                native[v.id] = REP
            elif p.follows("i"):
                native[v.id] = SPLIT
            elif p.reduce is not None:
                native[v.id] = PARTIAL
            else:
                raise KfuseError(f"line {s.line}: {s.fn.name}: output {p.name} neither follows the split "
                                 "rows nor reduces over them; cannot partition it")
    return native


def _phases(steps: list[_Step], native: dict[int, str]) -> None:
    """Each call's phase: the first after every conversion (collective or slice) its arguments need."""
    made: dict[int, int] = {}                 # value id -> phase of its producer (inputs: -1)
    for s in steps:
        phase = 0
        for a, f in zip(s.args, _forms(s.fn, s.mode or SPLIT)):
            for v in (a.values() if isinstance(a, ScalarArg) else (a,)):
                p = made.get(v.id, -1)
                phase = max(phase, p if (f or REP) == native[v.id] else p + 1)
        s.phase = phase
        for v in s.outputs:
            made[v.id] = phase


# -- segments ---------------------------------------------------------------------------------
class _Names:
    """Local names: a value's native form is its label; its block ``<label>_blk``, its whole
    ``<label>_all``; sizes ``<dim>`` whole and ``<dim>_blk`` a rank's block."""

    def __init__(self, program: Program, extra: list[str]):
        self.program = program
        self.taken = {v.label for v in program.values} | set(extra)
        self.forms: dict[tuple[int, str], str] = {}
        self.dims: dict[int, str] = {}
        for d in program.dims:
            base = d.name if re.fullmatch(r"[A-Za-z_]\w*", d.name) else "n_" + re.sub(r"\W", "_", d.name)
            self.dims[d.id] = self._fresh(base)
        self.blocks = {d: self._fresh(n + "_blk") for d, n in self.dims.items()}

    def _fresh(self, base: str) -> str:
        name, k = base, 2
        while name in self.taken:
            name, k = f"{base}{k}", k + 1
        self.taken.add(name)
        return name

    def of(self, v: Value, form: str, native: str) -> str:
        if form == native or (native == PARTIAL and form == REP):
            return v.label
        key = (v.id, form)
        if key not in self.forms:
            self.forms[key] = self._fresh(v.label + ("_blk" if form == SPLIT else "_all"))
        return self.forms[key]

    def shape(self, v: Value, form: str) -> str:
        if v.type == "scalar":
            return ""
        sizes = [self.blocks[v.dims[0]] if form == SPLIT else self._whole(v.dims[0])]
        sizes += [self._whole(d) for d in v.dims[1:]]
        return f"[{', '.join(sizes)}]"

    def _whole(self, d: int) -> str:
        lit = self.program.dims[d].literal
        return str(lit) if lit is not None else self.dims[d]


def _segments(program: Program, steps: list[_Step], native: dict[int, str], names: _Names) -> list[Segment]:
    phases = max((s.phase for s in steps), default=-1) + 1
    made = {v.id: -1 for v in program.inputs}
    values = {v.id: v for v in program.values}
    for s in steps:
        for v in s.outputs:
            made[v.id] = s.phase
            values[v.id] = v
    # (value id, form) -> phase that reads it
    reads: dict[tuple[int, str], list[int]] = {}
    for s in steps:
        for a, f in zip(s.args, _forms(s.fn, s.mode or SPLIT)):
            for v in (a.values() if isinstance(a, ScalarArg) else (a,)):
                reads.setdefault((v.id, f or REP), []).append(s.phase)
    outs = {v.id for v in program.outputs}
    segments: list[Segment] = []
    for k in range(-1, phases):
        if k >= 0:
            segments.append(_local(program, [s for s in steps if s.phase == k], native, names, reads, outs, k))
        # conversions of the values made in phase k
        made_k = sorted(vid for vid, p in made.items() if p == k)
        reduce = [vid for vid in made_k if native[vid] == PARTIAL]
        gather = [vid for vid in made_k if native[vid] == SPLIT and (vid, REP) in reads]
        slices = [vid for vid in made_k if native[vid] != SPLIT and (vid, SPLIT) in reads]
        if reduce:
            segments.append(Collective("all_reduce", tuple((values[v].label, values[v].label, None) for v in reduce)))
        if gather:
            segments.append(Collective("all_gather", tuple(
                (values[v].label, names.of(values[v], REP, SPLIT), values[v].dims[0]) for v in gather)))
        if slices:
            segments.append(Collective("slice", tuple(
                (values[v].label, names.of(values[v], SPLIT, native[v]), values[v].dims[0]) for v in slices)))
    return segments


def _local(program: Program, steps: list[_Step], native: dict[int, str], names: _Names,
           reads: dict[tuple[int, str], list[int]], outs: set[int], k: int) -> Local:
    decl: dict[str, tuple[str, str]] = {}          # local name -> (type, shape)
    inputs: list[str] = []
    scalar_inputs: list[str] = []
    made: set[int] = set()
    lines: list[str] = []
    for s in steps:
        mode = s.mode or SPLIT
        texts = []
        for a, f in zip(s.args, _forms(s.fn, mode)):
            for v in (a.values() if isinstance(a, ScalarArg) else (a,)):
                form = f or REP
                name = names.of(v, form, native[v.id])
                decl[name] = (v.type, names.shape(v, form))
                if v.id not in made and name not in inputs:
                    inputs.append(name)
                    if v.type == "scalar" and not v.is_input:
                        scalar_inputs.append(name)
            if isinstance(a, ScalarArg):
                texts.append(a.remap(lambda v: Value(v.id, v.label, v.label, v.type, v.dims)).text())
            else:
                texts.append(names.of(a, f or REP, native[a.id]))
        out_names = []
        for v in s.outputs:
            form = SPLIT if native[v.id] == SPLIT else REP
            decl[v.label] = (v.type, names.shape(v, form))
            made.add(v.id)
            out_names.append(v.label)
        lines.append(f"{', '.join(out_names)} = {s.fn.name}({', '.join(texts)});")
    returned = []
    for s in steps:
        for v in s.outputs:
            later = any(p > k for (vid, _), ps in reads.items() if vid == v.id for p in ps)
            if later or v.id in outs:
                returned.append(v.label)
    if not returned:                                # cannot happen: dead calls are dropped
        raise KfuseError(f"a local segment of {program.name} returns nothing")
    head = [f"{t} {n}{shape};" for n, (t, shape) in decl.items()]
    if inputs:
        head.append(f"input {', '.join(inputs)};")
    text = "\n".join(head + lines + [f"return {', '.join(returned)};"]) + "\n"
    return Local(text, tuple(inputs), tuple(returned), tuple(scalar_inputs))
