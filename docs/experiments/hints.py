"""Cache hints on the 16-byte loads and stores (prelude macros KF_LD_HINT, KF_ST_HINT, which
docs/experiments/load-store-hints.patch adds; apply it first): the model's
top plans of each sequence timed with each variant (cold L2, median of CUDA events), rounds
alternating the variants so that drift falls on all of them.  torch.compile's time for the
sequences without a matrix is taken in the same rounds.

    python docs/experiments/hints.py [--rounds R] [--variants a,b] SEQ:TOP ...   (e.g. bicgk:16 vadd:6)
"""
import argparse
import os
import statistics

from explore_util import top_plans

from kfuse.bench.harness import copy_bandwidth, device_timer
from kfuse.reference import device_case
from kfuse.runtime.timing import median_us
from kfuse.tuning.measure import measure_plans

VARIANTS = {
    "plain": "",
    "ld.L2::256B": "-DKF_LD_HINT=1",
    "ld.nc.L2::256B": "-DKF_LD_HINT=2",
    "ld.cs": "-DKF_LD_HINT=3",
    "ld.L1::no_allocate": "-DKF_LD_HINT=4",
    "ld.nc.no_allocate.256B": "-DKF_LD_HINT=5",
    "ld.L2::128B": "-DKF_LD_HINT=6",
    "ld.lu": "-DKF_LD_HINT=7",
    "st.cs": "-DKF_ST_HINT=1",
    "ld.cs+st.cs": "-DKF_LD_HINT=3 -DKF_ST_HINT=1",
    "256B+st.cs": "-DKF_LD_HINT=1 -DKF_ST_HINT=1",
}


def torch_time(name, prog, dims):
    import torch
    from kfuse.bench.peers import torch_sequences
    fn = torch.compile(torch_sequences(torch)[name])
    dev, _, _ = device_case(prog, dims, "float32", 0)
    args = {k: (torch.from_dlpack(v) if not isinstance(v, float) else v) for k, v in dev.items()}
    return lambda: median_us(lambda: fn(**args), reps=100, cold_l2=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seqs", nargs="+")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    names = a.variants.split(",")
    print(f"copy bandwidth: {copy_bandwidth(2**30, device_timer(30, 3)):.0f} GB/s (read + write)", flush=True)
    for item in a.seqs:
        seq, top = item.split(":")
        table = {v: [] for v in names}
        peer = None
        for r in range(a.rounds):
            for v in names:
                os.environ["KFUSE_NVRTC_OPTIONS"] = VARIANTS[v]
                c, dims, plans = top_plans(seq, int(top))
                p = c.program
                res, _ = measure_plans(c, plans, dims, reps=a.reps, log=lambda m: None)
                best = min(res, key=lambda x: x[0])
                first = next((t for t, n, _ in res if n == 0), float("nan"))
                table[v].append((best[0], best[1] + 1, first))
                print(f"{seq:8s} round {r} {v:24s} best {best[0]:8.1f} us (plan {best[1] + 1:2d})  "
                      f"first {first:8.1f} us", flush=True)
            if not any(x.type == "matrix" for x in p.values):
                os.environ["KFUSE_NVRTC_OPTIONS"] = ""
                peer = peer or torch_time(seq, p, dims)
                print(f"{seq:8s} round {r} {'torch.compile':24s} {peer():8.1f} us", flush=True)
        print(f"{seq}: median over rounds of the best plan's time")
        for v in names:
            print(f"  {v:24s} {statistics.median(t for t, _, _ in table[v]):8.1f} us  "
                  f"first {statistics.median(f for _, _, f in table[v]):8.1f} us", flush=True)


if __name__ == "__main__":
    main()
