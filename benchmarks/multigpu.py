"""BiCGK, GEMVER and GESUMMV over 1, 2, 4 or 8 GPUs: kfuse.distributed beside the same scripts written
by hand with torch.distributed and cuBLAS (torch.mv / addr, NCCL all-reduce).  One process per GPU,
launched by torchrun; each rank makes its own row blocks on its GPU (nothing whole is ever held, so
n can exceed one GPU's memory), every contender is timed with CUDA events (median of --reps after
warm-up) and the slowest rank counts.

Run on 1 and 2 H100s and on 1, 2 and 4 H200s (docs/performance.md, 'Several GPUs'; the records
in docs/results/multigpu-*/); 8 GPUs not yet run.  Give torchrun
the sizes as --size=N (its own parser takes a bare --n for one of its options).

    torchrun --standalone --nproc_per_node 8 benchmarks/multigpu.py --size 65536 --size max --out r8.json
    torchrun --standalone --nproc_per_node 1 benchmarks/multigpu.py --size 65536 --size max --out r1.json
    python3 benchmarks/multigpu.py --report r1.json r2.json r4.json r8.json > table.md

Per record: time (ms) of kfuse and of the hand-written peer; the bandwidth bound (this GPU's share
of the compulsory traffic at the measured copy bandwidth); the collectives alone (the same NCCL
calls on buffers of the same sizes); the bound efficiency (bound + collectives) / time -- the
issue's goal is at least 90 % on 8 GPUs for BiCGK and GEMVER at the largest n -- and, in the report,
the strong-scaling efficiency T(1) / (P T(P)) where one GPU ran the same n, and at the largest n
(each GPU holding as much as it can) the weak-scaling efficiency T(1 GPU, its largest n) / T(P GPUs,
their largest n).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("bicgk", "gemver", "gesummv")
MATRICES = {"bicgk": 1, "gemver": 3, "gesummv": 2}      # n x n matrices a rank holds (inputs and results)


def timed(fn, reps: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` runs (after two warm-up runs), the slowest rank's."""
    import torch
    import torch.distributed as dist
    fn()
    fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    t = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + write)."""
    import torch
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    ms = timed(lambda: b.copy_(a), 10)
    return 2 * a.numel() * 4 / (ms * 1e-3)


def largest_n(script: str, P: int, itemsize: int, row_block: int) -> int:
    """The largest n (a multiple of P row blocks) whose matrices fill at most 80 % of the free memory
    of every GPU."""
    import torch
    import torch.distributed as dist
    free = torch.tensor([torch.cuda.mem_get_info()[0]], device="cuda", dtype=torch.float64)
    dist.all_reduce(free, op=dist.ReduceOp.MIN)
    n = int(math.sqrt(0.8 * float(free.item()) * P / (MATRICES[script] * itemsize)))
    return n - n % (row_block * P)


def local_inputs(ds, n: int, rank: int, dtype) -> dict:
    """This rank's inputs made on its GPU: row blocks of the split ones, whole replicated ones."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(1000 + rank)
    out = {}
    for p in ds.part.inputs:
        if p.type == "scalar":
            out[p.name] = 1.5
            continue
        shape = [n] * len(p.dims)
        if p.layout == "split":
            a, b = ds.part.rows(p.dim, n)[rank]
            shape[0] = b - a
        out[p.name] = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
    return out


def peer(script: str, x: dict):
    """The script by hand: cuBLAS through torch on the local row blocks, NCCL all-reduce."""
    import torch
    import torch.distributed as dist
    if script == "bicgk":
        def run():
            q = torch.mv(x["A"], x["p"])
            s = torch.mv(x["A"].t(), x["r"])
            dist.all_reduce(s)
            return q, s
    elif script == "gemver":
        def run():
            B = torch.addr(torch.addr(x["A"], x["u1"], x["v1"]), x["u2"], x["v2"])
            xs = torch.mv(B.t(), x["y"]).mul_(x["b"])
            dist.all_reduce(xs)
            xs.add_(x["z"])
            return B, xs, torch.mv(B, xs).mul_(x["a"])
    else:
        def run():
            return torch.mv(x["A"], x["x"]).mul_(x["a"]).add_(torch.mv(x["B"], x["x"]), alpha=x["b"])
    return run


def local_traffic(ds, n: int, rank: int) -> int:
    """This rank's compulsory bytes: every local segment's inputs read once and outputs written once."""
    from kfuse.cost import counts
    sizes = {}
    for d, name in ds.part.dim_names.items():
        sizes[name] = n
        a, b = ds.part.rows(d, n)[rank]
        sizes[name + "_blk"] = b - a
    total = 0
    for c in ds.compiled:
        dims = {d.id: d.literal if d.literal is not None else sizes[d.name] for d in c.program.dims}
        total += counts.compulsory_traffic(c.program, c.dtype, dims)
    return total


def collectives_only(ds, n: int, dtype) -> float:
    """Milliseconds of the script's NCCL calls alone, on buffers of the same sizes."""
    import torch
    import torch.distributed as dist
    bufs = []
    for seg in ds.part.collectives:
        if seg.op == "all_reduce":
            bufs.append(("r", torch.zeros(len(seg.items) * n, device="cuda", dtype=dtype)))
        else:
            m = -(-n // ds.world_size)
            for _ in seg.items:
                bufs.append(("g", torch.zeros(m, device="cuda", dtype=dtype)))
    if not bufs:
        return 0.0

    def run():
        for kind, b in bufs:
            if kind == "r":
                dist.all_reduce(b)
            else:
                out = b.new_empty(b.numel() * ds.world_size)
                dist.all_gather_into_tensor(out, b)
    return timed(run, 20)


def release(ds) -> None:
    """Hand back what the last contender held: kfuse's call paths (temporaries, graphs, bindings),
    torch's and CuPy's cached blocks -- two pools side by side would not leave room for the next."""
    import torch
    for c in ds.compiled:
        c.calls.release()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    try:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass


def run_case(ds, script: str, n: int, rank: int, P: int, dtype, bw: float, reps: int) -> dict:
    import torch
    import torch.distributed as dist
    x = local_inputs(ds, n, rank, dtype)
    ds.check_sizes = True
    ds(rank, **x)                       # sizes checked once on every rank
    ds.check_sizes = False
    t_kfuse = timed(lambda: ds(rank, **x), reps)
    held = torch.cuda.mem_get_info()
    release(ds)
    if rank == 0:
        print(f"{script} n={n}: after kfuse {(held[1] - held[0]) / 2**30:.1f} GiB used on the GPU "
              f"({torch.cuda.memory_allocated() / 2**30:.1f} by torch tensors), after release "
              f"{(held[1] - torch.cuda.mem_get_info()[0]) / 2**30:.1f}", file=sys.stderr, flush=True)
    t_peer = timed(peer(script, x), reps)
    traffic = torch.tensor([local_traffic(ds, n, rank)], device="cuda", dtype=torch.float64)
    dist.all_reduce(traffic, op=dist.ReduceOp.MAX)
    bound = float(traffic.item()) / bw * 1e3
    coll = collectives_only(ds, n, dtype)
    del x
    release(ds)
    return dict(script=script, n=n, gpus=P, dtype=str(dtype).removeprefix("torch."), kfuse_ms=t_kfuse,
                peer_ms=t_peer, bound_ms=bound, collectives_ms=coll, bound_efficiency=(bound + coll) / t_kfuse,
                peer_bound_efficiency=(bound + coll) / t_peer, copy_GBps=bw / 1e9,
                device=torch.cuda.get_device_name())


def bench(args) -> list[dict]:
    import torch
    import torch.distributed as dist
    import kfuse.distributed as kd
    dist.init_process_group("nccl")
    rank, P = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dtype = getattr(torch, args.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    bw = copy_bandwidth()
    records = []
    for script in args.scripts:
        ds = kd.compile(ROOT / "examples" / f"{script}.kf", P, dtype=args.dtype)
        for n_arg in args.n:
            n = largest_n(script, P, itemsize, ds.part.row_block) if n_arg == "max" else int(n_arg)
            need = MATRICES[script] * n * max(b - a for a, b in ds.part.rows(0, n)) * itemsize
            free = torch.tensor([torch.cuda.mem_get_info()[0]], device="cuda", dtype=torch.float64)
            dist.all_reduce(free, op=dist.ReduceOp.MIN)          # every rank takes the same branch
            if need > 0.95 * float(free.item()):
                rec = dict(script=script, n=n, gpus=P, dtype=args.dtype, skipped=(
                    f"{MATRICES[script]} matrices of {need / MATRICES[script] / 2**30:.1f} GiB per GPU do not fit "
                    f"in {float(free.item()) / 2**30:.1f} GiB free"))
            else:
                rec = run_case(ds, script, n, rank, P, dtype, bw, args.reps)
            rec["largest"] = n_arg == "max"
            records.append(rec)
            if rank == 0:
                print(json.dumps(rec), flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(records, indent=1))
    dist.destroy_process_group()
    return records


def report(paths: list[str]) -> str:
    recs = [r for p in paths for r in json.loads(Path(p).read_text())]
    skipped = [r for r in recs if "skipped" in r]
    recs = [r for r in recs if "skipped" not in r]
    one = {(r["script"], r["n"], r["dtype"]): r["kfuse_ms"] for r in recs if r["gpus"] == 1}
    one_largest = {(r["script"], r["dtype"]): r["kfuse_ms"] for r in recs if r["gpus"] == 1 and r.get("largest")}
    lines = ["| script | dtype | n | GPUs | kfuse ms | torch+cuBLAS ms | bound ms | collectives ms | "
             "bound eff. | strong eff. | weak eff. | device |", "|" + " --- |" * 12]
    for r in sorted(recs, key=lambda r: (r["script"], r["dtype"], r["n"], r["gpus"])):
        t1 = one.get((r["script"], r["n"], r["dtype"]))
        strong = f"{t1 / (r['gpus'] * r['kfuse_ms']):.0%}" if t1 else "-"
        t1w = one_largest.get((r["script"], r["dtype"])) if r.get("largest") else None
        weak = f"{t1w / r['kfuse_ms']:.0%}" if t1w else "-"
        lines.append(f"| {r['script']} | {r['dtype']} | {r['n']} | {r['gpus']} | {r['kfuse_ms']:.3f} | {r['peer_ms']:.3f} | "
                     f"{r['bound_ms']:.3f} | {r['collectives_ms']:.3f} | {r['bound_efficiency']:.0%} | {strong} | {weak} | "
                     f"{r['device']} |")
    lines += [f"\nNot run: {r['script']} {r['dtype']} n = {r['n']} on {r['gpus']} GPU(s): {r['skipped']}." for r in skipped]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", "--size", dest="n", action="append", help="a size, or 'max' (the largest the GPUs hold); repeatable")
    ap.add_argument("--scripts", nargs="+", default=list(SCRIPTS), choices=SCRIPTS)
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", help="JSON file for this run's records (written by rank 0)")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the scaling table of saved runs and exit")
    args = ap.parse_args()
    if args.report:
        print(report(args.report))
        return
    args.n = args.n or ["65536", "max"]
    sys.path.insert(0, str(ROOT / "src"))
    bench(args)                         # rank 0 writes --out after every record


if __name__ == "__main__":
    main()
