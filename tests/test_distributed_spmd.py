"""The SPMD glue (kfuse.distributed.spmd) on the CPU: P threads stand in for P processes, a
barrier-synchronized NumPy backend for NCCL, the float64 reference for each compiled segment.
What runs is DistributedScript.__call__, its collectives, size check, split and gather --
everything but the GPU kernels and torch.distributed itself (tests/test_gpu_distributed.py)."""
import threading

import numpy as np
import pytest

from kfuse.distributed import partition
from kfuse.distributed.spmd import DistributedScript
from kfuse.errors import KfuseError, LaunchError
from kfuse.frontend import parse_script
from kfuse.reference import evaluate, random_inputs, relative_error

from conftest import EXAMPLES


class Board:
    """What each rank posts, read by all after a barrier (an all-gather)."""

    def __init__(self, P):
        self.barrier, self.slots = threading.Barrier(P, timeout=20), [None] * P

    def exchange(self, rank, x):
        self.slots[rank] = x
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class NumpyBackend:
    def __init__(self, board, rank, P):
        self.board, self.rank, self.world_size = board, rank, P

    def stream(self):
        return None

    def all_reduce(self, arrays):
        every = self.board.exchange(self.rank, [np.asarray(a) for a in arrays])
        return [sum(e[i] for e in every) for i in range(len(arrays))]

    def all_gather(self, block, rows):
        every = self.board.exchange(self.rank, np.asarray(block))
        assert [len(b) for b in every] == rows
        return np.concatenate(every)

    def all_gather_ints(self, values):
        return np.array(self.board.exchange(self.rank, list(values)))


class Reference:
    """Stands in for a CompiledScript: the local segment by the float64 reference."""

    def __init__(self, text, lib):
        self.program = parse_script(text, lib)

    def __call__(self, stream=None, **inputs):
        got = evaluate(self.program, inputs)
        outs = [got[v.id] for v in self.program.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _run_ranks(lib, prog, P, row_block, local_inputs, gather=True):
    """Each rank's outputs (gathered whole when ``gather``), or the exception each raised."""
    part = partition(prog, lib, P, row_block)
    compiled = [Reference(s.text, lib) for s in part.locals]
    board = Board(P)
    results = [None] * P

    def rank_main(r):
        ds = DistributedScript(part, lib, compiled)
        ds._backend = NumpyBackend(board, r, P)
        try:
            out = ds(r, **local_inputs(ds, r))
            results[r] = {k: ds.gather(k, v) for k, v in out.items()} if gather else out
        except Exception as e:              # noqa: BLE001 - reported per rank
            results[r] = e

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(P)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _example(lib, stem):
    path = next(p for p in EXAMPLES if p.stem == stem)
    return parse_script(path.read_text(), lib, str(path))


@pytest.mark.parametrize("P", (1, 2, 3, 8))
@pytest.mark.parametrize("stem", ["bicgk", "gemver", "gesummv", "sgemvt", "atax", "axpydot"])
def test_spmd_call_matches_reference(lib, stem, P):
    prog = _example(lib, stem)
    n = 77
    inputs = random_inputs(prog, {d.id: n for d in prog.dims}, 3)
    ref, mag = evaluate(prog, inputs), evaluate(prog, inputs, magnitude=True)
    results = _run_ranks(lib, prog, P, 4, lambda ds, r: {k: ds.split(k, v, r) if isinstance(v, np.ndarray) else v
                                                         for k, v in inputs.items()})
    for r, got in enumerate(results):
        assert isinstance(got, dict), f"rank {r}: {got!r}"
        for v in prog.outputs:
            assert relative_error(got[v.name], ref[v.id], mag[v.id]) < 1e-13, (r, v.name)


def test_ranks_disagreeing_on_sizes_refused_on_every_rank(lib):
    prog = _example(lib, "bicgk")
    rows, cols = prog.inputs[0].dims
    inputs = random_inputs(prog, {rows: 64, cols: 48}, 1)

    def local(ds, r):
        out = {k: ds.split(k, v, r) for k, v in inputs.items()}
        if r == 1:                              # rank 1 holds 49 columns (A and p agree there)
            out["A"], out["p"] = np.ones((32, 49)), np.ones(49)
        return out

    for got in _run_ranks(lib, prog, 2, 8, local):
        assert isinstance(got, LaunchError) and "ranks disagree on size n_A_cols: [48, 49]" in str(got)


def test_inconsistent_inputs_on_one_rank_refused_on_every_rank(lib):
    prog = _example(lib, "gemver")
    inputs = random_inputs(prog, {d.id: 64 for d in prog.dims}, 1)

    def local(ds, r):
        out = {k: ds.split(k, v, r) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        if r == 1:
            out["v1"] = np.ones(65)             # a replicated vector of another length on rank 1
        return out

    for got in _run_ranks(lib, prog, 2, 8, local):
        assert isinstance(got, LaunchError) and "rank 1: input v1 has a shape that disagrees" in str(got)


def test_blocks_not_from_split_refused(lib):
    prog = _example(lib, "gesummv")
    inputs = random_inputs(prog, {d.id: 64 for d in prog.dims}, 2)

    def local(ds, r):                            # rows dealt 40 / 24 instead of 32 / 32
        rows = slice(0, 40) if r == 0 else slice(40, 64)
        return {k: (v[rows] if k in ("A", "B") else v) for k, v in inputs.items()}

    for got in _run_ranks(lib, prog, 2, 8, local):
        assert isinstance(got, LaunchError) and "hold [40, 24] rows of n = 64" in str(got)


def test_missing_input_and_wrong_rank(lib):
    prog = _example(lib, "bicgk")
    part = partition(prog, lib, 2)
    ds = DistributedScript(part, lib, [])
    ds._backend = NumpyBackend(Board(1), 0, 2)
    with pytest.raises(LaunchError, match="rank 0: missing input"):
        ds(0, A=np.ones((64, 64)), p=np.ones(64))
    with pytest.raises(KfuseError, match="called as rank 1 in the process of rank 0"):
        ds(1, A=np.ones((64, 64)), p=np.ones(64), r=np.ones(32))
    with pytest.raises(KfuseError, match="no input or output"):
        ds.split("zz", np.ones(3), 0)
