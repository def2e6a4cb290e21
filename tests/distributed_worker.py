"""One rank of tests/test_gpu_distributed.py, launched by torchrun (not collected by pytest):
runs a script through kfuse.distributed on whole inputs split per rank, gathers the outputs and
compares them with the float64 reference; then checks that disagreeing sizes are refused.
Usage: torchrun --nproc_per_node P tests/distributed_worker.py SCRIPT N DTYPE ROW_BLOCK"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import kfuse.distributed as kd
from kfuse.errors import LaunchError
from kfuse.frontend import parse_script
from kfuse.library.loader import load_library
from kfuse.reference import evaluate, random_inputs, relative_error


def main(script: str, n: int, dtype: str, row_block: int) -> int:
    dist.init_process_group("nccl")
    rank, P = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    lib = load_library()
    prog = parse_script(open(script).read(), lib, script)
    inputs = random_inputs(prog, {d.id: n for d in prog.dims}, seed=7)        # the same on every rank
    tdt = getattr(torch, dtype)
    rounded = {k: (v.astype(dtype).astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    ref, mag = evaluate(prog, rounded), evaluate(prog, rounded, magnitude=True)
    ds = kd.compile(script, P, dtype=dtype, row_block=row_block, library=lib)
    local = {k: (torch.as_tensor(ds.split(k, v, rank), dtype=tdt, device="cuda").contiguous()
                 if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    out = ds(rank, **local)
    tol = 1e-12 if dtype == "float64" else 1e-5
    failures = []
    for v in prog.outputs:
        whole = ds.gather(v.name, out[v.name])
        got = torch.as_tensor(whole).double().cpu().numpy()
        err = relative_error(got, ref[v.id], mag[v.id])
        if not err <= tol:
            failures.append(f"rank {rank}: {v.name} off by {err:.3g}")
    bad = dict(local)
    split_vec = next((p for p in ds.part.inputs if p.layout == "split" and p.type == "vector"), None)
    if split_vec is not None and P > 1:         # rank 0 holds one row too many: refused on every rank
        x = local[split_vec.name]
        bad[split_vec.name] = torch.cat([x, x[:1]]) if rank == 0 else x
        try:
            ds(rank, **bad)
            failures.append(f"rank {rank}: rows dealt wrong were not refused")
        except LaunchError as e:              # dealt wrong (rows of ...) or out of step with rank 0's others
            if "rows of" not in str(e) and "disagrees" not in str(e):
                failures.append(f"rank {rank}: unexpected message {e}")
    print("\n".join(failures) or f"rank {rank}: ok", flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
