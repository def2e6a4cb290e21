"""benchmarks/multigpu.py's report on the CPU: the scaling table of saved records (strong scaling
at one n, weak scaling at each GPU count's largest n, sizes that did not fit listed as not run)."""
import json
import subprocess
import sys

from conftest import ROOT

BENCH = ROOT / "benchmarks" / "multigpu.py"


def _record(script, n, gpus, ms, largest=False, dtype="float32"):
    return dict(script=script, n=n, gpus=gpus, dtype=dtype, kfuse_ms=ms, peer_ms=2 * ms, bound_ms=ms / 1.02,
                collectives_ms=0.05, bound_efficiency=0.99, peer_bound_efficiency=0.5, copy_GBps=3000.0,
                device="NVIDIA H100 80GB HBM3", largest=largest)


def _report(tmp_path, *runs):
    paths = []
    for k, recs in enumerate(runs):
        p = tmp_path / f"r{k}.json"
        p.write_text(json.dumps(recs))
        paths.append(str(p))
    proc = subprocess.run([sys.executable, str(BENCH), "--report", *paths], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_strong_and_weak_scaling_columns(tmp_path):
    one = [_record("bicgk", 65536, 1, 4.0), _record("bicgk", 129344, 1, 22.0, largest=True)]
    two = [_record("bicgk", 65536, 2, 2.5), _record("bicgk", 182592, 2, 22.0 / 0.95, largest=True),
           {"script": "gemver", "n": 65536, "gpus": 2, "dtype": "float64", "largest": False,
            "skipped": "3 matrices of 16.0 GiB per GPU do not fit in 40.0 GiB free"}]
    out = _report(tmp_path, one, two)
    rows = {tuple(c.strip() for c in line.split("|")[1:5]): [c.strip() for c in line.split("|")[1:-1]]
            for line in out.splitlines() if line.startswith("| bicgk")}
    assert rows[("bicgk", "float32", "65536", "2")][9] == "80%"       # strong: 4.0 / (2 x 2.5)
    assert rows[("bicgk", "float32", "182592", "2")][10] == "95%"     # weak: 22.0 / (22.0 / 0.95)
    assert rows[("bicgk", "float32", "65536", "1")][10] == "-"        # not a largest-n record
    assert "Not run: gemver float64 n = 65536 on 2 GPU(s): 3 matrices of 16.0 GiB per GPU do not fit" in out


def test_saved_h100_records_report():
    """The records in docs/results/multigpu-H100x2/ give the table docs/performance.md quotes."""
    paths = sorted(str(p) for p in (ROOT / "docs" / "results" / "multigpu-H100x2").glob("*.json"))
    proc = subprocess.run([sys.executable, str(BENCH), "--report", *paths], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = (ROOT / "docs" / "performance.md").read_text().split("### 1 and 2 H100s", 1)[1].split("\n### ", 1)[0]
    for line in proc.stdout.splitlines():
        if line.startswith("| bicgk") or line.startswith("| gemver") or line.startswith("| gesummv"):
            assert line.replace(" NVIDIA H100 80GB HBM3 |", " H100 |") in doc, line
