"""A device loop bound to its arrays: two buffer sets for the state, the body's program bound to
them, the small kernels around it, and the graphs of many steps (``runtime/loopgraph.py``).

The loop (``ir/loop.LoopArtifact``: the body's program, where each state entry of the next step
comes from, and the writer of its CUDA text) is what an ``Instance`` turns into launches:

    step p (p = 0: set 0 -> set 1; p = 1: set 1 -> set 0):
        the program's kernels, patched to read set p and write set 1 - p (its fills left out)
        kf_loop_copy (an entry the body passes on from another entry or output)
        kf_scalars (entries the body computes by scalar arithmetic)
        kf_loop_index (the fori counter, after everything that reads it)
        kf_loop_clear (the next step's reduced outputs), or in a while loop kf_loop_next

A while loop runs ahead: its steps are launched in chunks, and ``kf_loop_next`` after each one
evaluates the condition, counts the step and saves the state it made while the loop goes on.
The steps launched after the one that stopped it compute garbage nobody reads; the saved state
is the result.  No kernel of the program needs to know it runs in a loop.

An instance is made once per state signature, stream and invariant arrays and kept by the body;
each run copies the initial state into set 0, launches, and copies the result into new arrays,
so runs never share memory with what they return."""
from __future__ import annotations

import sys

import numpy as np

from ..env import choice
from ..errors import CompileError, LaunchError
from ..ir.loop import LoopArtifact, counts
from . import csr as csr_inputs
from . import driver, loopends, loopgraph, merged, persistent
from .args import adapt, current_stream, facts, torch_tensor_type
from .binding import OUT, TMP
from .control import control_module
from .executor import Executor
from .gpu import cupy
from .launch import KernelLaunch, PackedArgs

D2H = 2  # cudaMemcpyKind
WHILE_CHUNK = 8           # steps of a while loop per graph (the host looks at the count between them)
# a while loop is one graph with a conditional WHILE node where the driver has them (chunks
# launched from the host ran 1.4-1.6x slower: a chunk runs ahead and the host polls); chunks with
# KFUSE_LOOP_WHILE=chunks
WHILE_GRAPH = choice("KFUSE_LOOP_WHILE") == "graph"
CHUNK_LAUNCHES = 512      # launches in one graph of a fori loop (its steps repeat it)


def _framework(leaves: list) -> tuple[bool, int]:
    """(torch?, device) of the state's arrays."""
    tensor = torch_tensor_type()
    arrays = [x for x in leaves if hasattr(x, "shape") and not csr_inputs.is_csr(x)]
    torch_in = tensor is not None and any(isinstance(x, tensor) for x in arrays)
    return torch_in, facts(adapt(arrays[0], "state"))[3]


def _entry_ptr(a) -> int:
    """The pointer a state entry's slot holds (a CSR matrix: its row pointers')."""
    return facts(a.indptr if isinstance(a, csr_inputs.CSR) else a)[4]


class Instance:
    """See the module docstring."""

    @staticmethod
    def key(art: LoopArtifact, leaves: list, pred) -> tuple:
        """What an instance is made once for: the state's framework, device, stream and shapes,
        the arrays read in place, the condition and the modes."""
        torch_in, device = _framework(leaves)
        shapes = tuple(tuple(getattr(x, "shape", ())) for x in leaves)
        kept = tuple(_kept_key(leaves[j], j) for j, s in enumerate(art.sources)
                     if s == ("keep",) and (hasattr(leaves[j], "shape") or csr_inputs.is_csr(leaves[j])))
        return (torch_in, device, current_stream(torch_in, device), shapes, kept, pred, WHILE_GRAPH, persistent.MODE,
                persistent.MIN_BLOCKS, merged.MODE, merged.MAX_GRID, merged.BLOCK, merged.SIDE_BY_SIDE)

    def __init__(self, art: LoopArtifact, leaves: list, pred):
        cp = cupy()
        self.art, self.pred = art, pred
        self.torch_in, self.device = _framework(leaves)
        self.dtype = np.dtype(art.dtype)
        self.executor = Executor(art.program, art.dtype, art.resolve)     # the body's call path
        self._out_leaf = dict(art.out_leaf)
        with cp.cuda.Device(self.device):
            self._build(leaves, pred)

    # -- memory ------------------------------------------------------------------------------------
    def _empty(self, shape):
        if self.torch_in:
            torch = sys.modules["torch"]
            from .args import torch_dtype
            return torch.empty(shape, dtype=torch_dtype(self.dtype), device=f"cuda:{self.device}")
        return cupy().empty(shape, self.dtype)

    def _leaf(self, x, j: int):
        """A state entry as an adapted array (a number becomes a 0-d array of the element type)."""
        if csr_inputs.is_csr(x):          # read in place: its arrays as given (the binding checks them)
            c = csr_inputs.adapt_csr(x, f"state entry {j}")
            csr_inputs.check(f"state entry {j}", c, self.dtype, self.device, "the state's first array")
            return c
        if not hasattr(x, "shape"):
            a = self._empty(())
            a.fill_(float(x)) if self.torch_in else a.fill(float(x))
            return a
        a = adapt(x, f"state entry {j}")
        f = facts(a)
        if f[3] != self.device:
            raise LaunchError(f"state entry {j} is on GPU {f[3]}, the others on GPU {self.device}")
        if f[1] != self.dtype:
            raise LaunchError(f"state entry {j}: dtype {f[1]}, the loop runs {self.dtype}")
        return a

    def _build(self, leaves: list, pred) -> None:
        art, cp = self.art, cupy()
        given = [self._leaf(x, j) for j, x in enumerate(leaves)]
        self.shapes = [tuple(a.shape) for a in given]
        self.nbytes = [int(np.prod(s, dtype=np.int64)) * self.dtype.itemsize for s in self.shapes]
        # set[p][j]: entry j in buffer set p; an entry read in place is the caller's array in both
        self.sets = [[g if s == ("keep",) else self._empty(g.shape) for g, s in zip(given, art.sources)]
                     for _ in range(2)]
        for j, s in enumerate(art.sources):
            if s == ("keep",):
                self.sets[1][j] = self.sets[0][j]
        self.hidden = {k: self._empty(()) for k in art.hidden}      # outputs no entry takes: 0-d
        self.index = self._empty(())
        self.ctl = cp.zeros(5, np.int32)
        # a while loop's result: the state of the last step counted (entries read in place aside)
        self.carried = [j for j, s in enumerate(art.sources) if s != ("keep",)]
        self.saved = {j: self._empty(self.shapes[j]) for j in self.carried} if pred is not None else {}
        self.cst = cp.zeros(max(1, counts((pred,))[1] if pred is not None else 0), self.dtype)
        self.ptr = [[_entry_ptr(a) for a in s] for s in self.sets]
        # the program bound to set 0 -> set 1 (checks every argument once), patched per step
        self.pdl: bool | None = None       # False once a driver refused programmatic launches in a graph
        self._bind()
        self.tmp = cp.cuda.alloc(self.binding.tmp_bytes) if self.binding.tmp_bytes else None
        # the small kernels
        self._split_fills()
        # the WHILE node's kernels set a graph handle: relocatable, linked with the device runtime
        self.conditional = pred is not None and WHILE_GRAPH and driver.has_conditional_nodes()

        def source(conditional: bool) -> str:      # the control module's text: the loop's writer's
            return art.kernels.control(self.dtype.name, art.tails, pred, conditional, clears=len(self.clears),
                                       saved=len(self.saved), carried=len(self.carried))
        try:
            module = control_module(source(self.conditional), relocatable=self.conditional)
        except CompileError:
            if not self.conditional:
                raise
            self.conditional = False            # no device runtime to link: chunks from the host
            module = control_module(source(False), relocatable=False)
        self.fn = {name: module.get_function(name) for name in
                   (["kf_scalars"] if art.tails else []) + (["kf_loop_clear"] if self.clears else [])
                   + ["kf_loop_set", "kf_loop_index", "kf_loop_copy"]
                   + (["kf_loop_start", "kf_loop_copies"] if self.carried else [])
                   + (["kf_loop_first", "kf_loop_next"] if pred is not None else [])
                   + (["kf_loop_again"] if self.conditional else [])}
        # state entries the predicate reads, in the order of its p{k} pointers (leaf k is entry k:
        # every entry up to the largest read is passed)
        self.pred_reads = list(range(counts((pred,))[0])) if pred is not None else []
        self.capture = driver.create_stream()
        self.graphs: dict = {}
        # the whole loop as one persistent kernel where it can and should run one (runtime/persistent.py)
        self.persistent = None if self.binding.csr else persistent.build(self)
        self.ran_persistent = False
        # else the step's runs of one-block kernels as one launch each (runtime/merged.py)
        self.merged = merged.build(self, merged.folded(self)) if self.persistent is None else None
        # the caller's arrays read in place stay alive with the graphs that read them
        self._keep = [g for g, s in zip(given, art.sources) if s == ("keep",)]

    def _bind(self) -> None:
        """The body's program bound to buffer set 0 -> set 1 (every argument checked once), and
        the pointers each step patches in (``patches[p]``: set p -> set 1 - p)."""
        art = self.art
        ins = {name: self._source(src, 0) for name, src in art.inputs}
        outs = {name: self._out(k, 0) for k, name in enumerate(art.outputs)}
        self.binding = self.executor.bind(ins, outs, self.pdl)
        b = self.binding
        self.patches = [([self._in_ptr(n, p) for n in b.array_inputs],
                         [self._out_ptr(art.outputs.index(n), p) for n in b.out_names])
                        for p in (0, 1)]
        if b.csr:       # CSR matrices are read in place: their structure checked, row mappings set, once
            b.check_csr(ins, self.patches[0][0])

    def _in_ptr(self, name: str, p: int) -> int:
        """The pointer of a binding's array input slot in step p (a csr input A has three: A,
        A#indices, A#data)."""
        base, _, part = name.partition("#")
        x = self._source(self.art.input_source(base), p)
        if isinstance(x, csr_inputs.CSR):
            return facts(x[csr_inputs.PARTS.index(part or "indptr")])[4]
        return facts(x)[4]

    def _split_fills(self) -> None:
        """The program's fills (kf_fill launches clearing reduced outputs before the kernels that
        add into them) leave the step: ``clears`` lists what they set, (pointer source, offset or
        index, entries, value), and one kf_loop_clear at the end of each step sets them for the
        next (the step before the first: ``start``).  The step's first kernel is then launched the
        ordinary way: it must wait for the step before it."""
        kept, clears = [], []
        for launch, patches in self.binding.launches:
            if launch.name == "kf_fill":
                values = launch.args.values
                blocks = [(src, a) for _, src, a in patches]
                for (src, a), n in zip(blocks, (values[1].value, values[3].value)):
                    clears.append((src, a, int(n), float(values[4].value)))
            else:
                kept.append(launch)
        if kept and kept[0].dependent:
            kept[0] = kept[0].independent()
        self.kernels, self.clears = kept, clears
        self.ends: loopends.Ends | None = None     # a run's start and end launches (``_ends``)

    def _ranges(self, p: int) -> list:
        """(pointer, entries, value) of the clears of step p's reduced outputs."""
        out = []
        for src, a, n, value in self.clears:
            if src == OUT:
                ptr = self.patches[p][1][a]
            elif src == TMP and self.tmp is not None:
                ptr = self.tmp.ptr + a
            else:
                raise LaunchError(f"a loop step clears memory of kind {src}, which it does not own")
            out.append((ptr, n, value))
        return out

    def _clear(self, p: int) -> KernelLaunch:
        """kf_loop_clear of step p's reduced outputs."""
        ranges = self._ranges(p)
        args = [a for ptr, n, value in ranges for a in (ptr, np.int64(n), self.dtype.type(value))]
        return KernelLaunch(self.fn["kf_loop_clear"], loopends.blocks(max(n for _, n, _ in ranges)), 256,
                            PackedArgs((np.int32(0), *args)), "kf_loop_clear")

    def _source(self, src: tuple, p: int):
        if src == ("index",):
            return self.index
        if src[0] == "out":
            return self._out(src[1], p)
        return self.sets[p][src[1]]

    def _out(self, k: int, p: int):
        j = self._out_leaf.get(k)
        return self.hidden[k] if j is None else self.sets[1 - p][j]

    def _ptr(self, src: tuple, p: int) -> int:
        return facts(self._source(src, p))[4]

    def _out_ptr(self, k: int, p: int) -> int:
        return facts(self._out(k, p))[4]

    # -- one step ----------------------------------------------------------------------------------
    def tail_pointers(self, p: int) -> tuple[list[tuple[int, int, int]], list[int], list[int]]:
        """What step p does after its kernels, as pointers: (destination, source, entries) of each
        state entry copied from an input, the entries the returned arithmetic (``kf_scalars``)
        writes, and what that arithmetic reads."""
        art, item = self.art, self.dtype.itemsize
        copies = [(self.ptr[1 - p][j], self._ptr(src[1], p), self.nbytes[j] // item)
                  for j, src in enumerate(art.sources) if src[0] == "copy"]
        outs = [self.ptr[1 - p][j] for j, src in enumerate(art.sources) if src[0] == "tail"]
        reads = [self._ptr(src, p) for src in art.tail_reads]
        return copies, outs, reads

    def step(self, p: int, clear: bool = True, then_next: bool = False):
        """The launches of step p, as a function of a stream (for capture); ``clear``: ending with
        the next step's clears (a while loop's kf_loop_next makes them instead); ``then_next``:
        ending with kf_loop_next (or a merged run that does its work)."""
        b, art = self.binding, self.art
        ins, outs = self.patches[p]
        tmp = self.tmp.ptr if self.tmp is not None else 0
        extra: list = []
        copies, outs_t, reads = self.tail_pointers(p)
        for dst, src, n in copies:
            extra.append(KernelLaunch(self.fn["kf_loop_copy"], loopends.blocks(n), 256, PackedArgs(
                (dst, src, np.int64(n))), "kf_loop_copy"))
        if art.tails:
            extra.append(self._launch("kf_scalars", *outs_t, *reads))
        if art.indexed:
            extra.append(self._launch("kf_loop_index", facts(self.index)[4]))
        if self.clears and clear:
            extra.append(self._clear(1 - p))
        kernels = self.kernels
        calls = [launch.launch for launch in kernels]
        m = self.merged
        if m is not None:
            calls = [m.launcher(s, kernels, merged.folded_fields(self, p) if m.folds and s[1] == len(kernels) else {})
                     if isinstance(s, tuple) else kernels[s].launch for s in m.segments]
            if m.head is not None:
                calls[0] = m.head_launcher(kernels[0], any(L.dependent for L in kernels))
            if m.folds:
                extra = []          # taken in by the last run (kf_loop_next's work too)
        if then_next and not (m is not None and m.folds):
            extra.append(self._next(p))
        calls += [launch.launch for launch in extra]

        def launches(stream: int) -> None:
            b.set_flip(p & b.alternate)
            b.patch(ins, outs, 0, tmp, [])
            for call in calls:
                call(stream)
        return launches

    def _launch(self, name: str, *args) -> KernelLaunch:
        return KernelLaunch(self.fn[name], 1, 1, PackedArgs(args), name)

    def _predicate_args(self, where: int) -> list:
        return ([facts(self.cst)[4]] if self.pred is not None and counts((self.pred,))[1] else []) + [self.ptr[where][j] for j in self.pred_reads]

    def _first(self, handle: int = 0) -> KernelLaunch:
        """kf_loop_first: the condition on the initial state (set 0)."""
        return self._launch("kf_loop_first", np.uint64(handle), np.int32(bool(handle)), facts(self.ctl)[4],
                            *self._predicate_args(0))

    def _next(self, p: int) -> KernelLaunch:
        """kf_loop_next after step p: the condition on set 1 - p, the count, the save of set 1 - p
        and the clears of step p + 1."""
        args: list = [np.uint64(0), np.int32(0), np.int32(p), facts(self.ctl)[4]] + self._predicate_args(1 - p)
        ranges = self._ranges(1 - p)
        args += [a for ptr, n, value in ranges for a in (ptr, np.int64(n), self.dtype.type(value))]
        sizes = [self.nbytes[j] // self.dtype.itemsize for j in self.saved]
        args += [a for j, n in zip(self.saved, sizes) for a in (facts(self.saved[j])[4], self.ptr[1 - p][j], np.int64(n))]
        most = max([n for _, n, _ in ranges] + sizes + [1])
        return KernelLaunch(self.fn["kf_loop_next"], loopends.blocks(most), 256, PackedArgs(tuple(args)), "kf_loop_next")

    # -- runs --------------------------------------------------------------------------------------
    def start(self, leaves: list, index: float = 0.0, consts=(), most: int = 0) -> None:
        """Set the bound, numbers and counter, copy the initial state into set 0 and clear the
        first step's reduced outputs, on the caller's stream (``runtime/loopends.py``)."""
        cp = cupy()
        self.stream = current_stream(self.torch_in, self.device)
        self.most = most
        self._held: list = []
        with cp.cuda.Device(self.device):
            for j in self.carried:
                self._held.append(self._leaf(leaves[j], j))      # a number's 0-d array outlives the copy
            self._ends().start([facts(x)[4] for x in self._held], index, consts, most, self.stream)

    def _ends(self) -> loopends.Ends:
        """The run ends' launches, made at the first run after the clears were set."""
        if self.ends is None:
            self.ends = loopends.Ends(self)
        return self.ends

    def _graph(self, key, make):
        g = self.graphs.get(key)
        if g is None:
            with cupy().cuda.Device(self.device):
                try:
                    g = make()
                except LaunchError:
                    if self.pdl is not None:
                        raise
                    # a driver that takes no programmatic launches in these graphs: plain launches
                    self.pdl = False
                    self._bind()
                    self._split_fills()
                    self.graphs.clear()
                    g = make()
            self.graphs[key] = g
        return g

    def _run_persistent(self, most: int) -> bool:
        """The loop as one launch of the persistent kernel, where there is one."""
        self.ran_persistent = self.persistent is not None
        if self.persistent is not None:
            with cupy().cuda.Device(self.device):
                self.persistent.launch(self.stream, facts(self.ctl)[4], facts(self.cst)[4], most)
        return self.ran_persistent

    def run_counted(self, steps: int) -> None:
        """``steps`` steps from set 0: one persistent kernel, or graphs of up to CHUNK_LAUNCHES
        launches."""
        if self._run_persistent(steps):
            return
        per = max(1, self.binding.launch_count + len(self.art.tails) + int(self.art.indexed))
        chunk = max(2, (CHUNK_LAUNCHES // per) // 2 * 2)
        chunk = min(chunk, steps - steps % 2) if steps >= 2 else 0
        if chunk:
            g = self._graph(("counted", chunk), lambda: loopgraph.counted(
                self.capture, [self.step(k % 2) for k in range(chunk)]))
            for _ in range(steps // chunk):
                g.launch(self.stream)
        rest = steps - (steps // chunk) * chunk if chunk else steps
        if rest:
            g = self._graph(("counted", rest), lambda: loopgraph.counted(
                self.capture, [self.step(k % 2) for k in range(rest)]))
            g.launch(self.stream)

    def run_while(self) -> tuple[int, bool]:
        """The while loop from set 0: (steps counted, whether the condition ended it).  Chunks of
        WHILE_CHUNK steps, each step followed by kf_loop_next, are one graph launched from the
        host while the count copied back after the chunk before says the loop goes on (the GPU
        never waits for the host; a chunk runs ahead at most), or, with WHILE_GRAPH, the body of a
        conditional WHILE node: the whole loop one launch.  The host waits once, at the end."""
        if self._run_persistent(self.most):
            return self._result()
        with cupy().cuda.Device(self.device):
            if self.conditional:
                try:
                    g = self._graph(("while", WHILE_CHUNK), self._while_graph)
                except LaunchError:
                    self.conditional = False       # a driver that refuses these graphs: chunks
                else:
                    g.launch(self.stream)
                    return self._result()
            self._first().launch(self.stream)
            self._run_chunks()
        return self._result()

    def _chunk(self, s: int) -> None:
        for k in range(WHILE_CHUNK):
            self.step(k % 2, clear=False, then_next=True)(s)

    def _while_graph(self):
        def first(s: int, h: int) -> None:
            self._first(h).launch(s)

        def again(s: int, h: int) -> None:
            self._launch("kf_loop_again", np.uint64(h), facts(self.ctl)[4]).launch(s)
        return loopgraph.while_graph(self.capture, first, self._chunk, again)

    def _run_chunks(self) -> None:
        cp = cupy()
        g = self._graph(("chunk", WHILE_CHUNK), lambda: loopgraph.counted(self.capture, [self._chunk]))
        if not hasattr(self, "_pinned"):
            self._pinned = cp.cuda.alloc_pinned_memory(40)
            self._seen = np.frombuffer(self._pinned, np.int32, 10).reshape(2, 5)
            self._events = [driver.Event(), driver.Event()]
        k = 0
        while True:
            g.launch(self.stream)
            cp.cuda.runtime.memcpyAsync(self._seen[k % 2].ctypes.data, facts(self.ctl)[4], 20, D2H, self.stream)
            self._events[k % 2].record(self.stream)
            if k:
                self._events[(k - 1) % 2].wait()
                if not (self._seen[(k - 1) % 2][1] and self._seen[(k - 1) % 2][2]):
                    break
            k += 1

    def _result(self) -> tuple[int, bool]:
        driver.synchronize(self.stream)
        count, _, _, _, holds = (int(v) for v in self.ctl.get())
        return count, not holds

    def while_result(self, steps: int):
        """What ``finish`` copies after a while loop of ``steps`` steps: the set the persistent
        kernel left it in, or the state kf_loop_next saved (the initial one after none)."""
        if self.ran_persistent:
            return steps % 2
        return "saved" if steps else "initial"

    def finish(self, p, leaves: list) -> list:
        """New arrays holding set ``p`` (0 or 1), the saved state of a while loop ("saved") or
        the initial state ("initial"), copied on the caller's stream (``runtime/loopends.py``);
        entries read in place are the caller's own arrays."""
        out, pairs = list(leaves), []
        with cupy().cuda.Device(self.device):
            for j in self.carried:
                out[j] = self._empty(self.shapes[j])
                if p == "saved":
                    src = facts(self.saved[j])[4]
                elif p == "initial":
                    x = self._leaf(leaves[j], j)
                    self._held.append(x)         # a number's 0-d array outlives the copy
                    src = facts(x)[4]
                else:
                    src = self.ptr[p][j]
                pairs.append((facts(out[j])[4], src))
            self._ends().finish(pairs, self.stream)
        return out


def _kept_key(x, j: int) -> tuple:
    """What fixes a state entry read in place: its pointer, or a CSR matrix's three pointers,
    non-zeros and index type."""
    if csr_inputs.is_csr(x):
        c = csr_inputs.adapt_csr(x, f"state entry {j}")
        return (*csr_inputs.pointers(c), c.shape, csr_inputs.index_itemsize(c))
    return (facts(adapt(x, f"state entry {j}"))[4],)
