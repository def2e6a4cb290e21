"""Dependency graph and the command line (CPU)."""
import subprocess
import sys

import pytest

import kfuse
from kfuse.cli.main import main
from kfuse.ir.graph import DependencyGraph

from conftest import ROOT


def graph(name):
    return DependencyGraph(kfuse.compile(ROOT / "examples" / f"{name}.kf").program)


def test_gemver_graph():
    g = graph("gemver")
    assert g.preds == [set(), {0}, {1}, {1, 2}]
    assert g.topological_order() == [0, 1, 2, 3]
    assert g.reaches(0, 3) and not g.reaches(3, 0)
    assert [v.name for v in g.edge_values[(2, 3)]] == ["x"]


def test_shared_inputs_are_recorded():
    g = graph("bicgk")
    assert g.preds == [set(), set()]
    a = next(v for v in g.program.values if v.name == "A")
    assert g.shared_inputs[a.id] == [0, 1]
    assert 'label="shares A"' in g.dot()


def test_topological_order_respects_dependencies():
    prog = kfuse.compile("vector x, y, t, u; input x; t = scal(2, x); u = vadd(t, x); y = scal(3, u); return y, t;")
    assert DependencyGraph(prog.program).topological_order() == [0, 1, 2]


def test_cli_compile_to_file(tmp_path, capsys):
    out = tmp_path / "g.cu"
    assert main(["compile", str(ROOT / "examples" / "gemver.kf"), "-o", str(out), "--dtype", "float64"]) == 0
    text = out.read_text()
    assert "typedef double real;" in text and text.count('extern "C" __global__ void __launch_bounds__') == 2   # fused plan
    assert main(["compile", str(ROOT / "examples" / "gemver.kf"), "-o", str(out), "--unfused"]) == 0
    assert out.read_text().count('extern "C" __global__ void __launch_bounds__') == 4


def test_cli_plan_and_graph(capsys):
    assert main(["plan", str(ROOT / "examples" / "atax.kf"), "--graph"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph ") and out.rstrip().endswith("}")    # DOT alone: pipes into Graphviz
    assert "t = gemv(A, x)" in out and "subgraph cluster_0" in out and "plan for" not in out


def test_cli_reports_script_errors(tmp_path, capsys):
    bad = tmp_path / "bad.kf"
    bad.write_text("vector x, y;\ninput x;\ny = scall(2, x);\nreturn y;\n")
    assert main(["compile", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:5: error: unknown function scall (did you mean scal?)" in err


def test_cli_size_parsing():
    from kfuse.cli.main import parse_sizes
    p = kfuse.compile(ROOT / "examples" / "bicgk.kf").program
    assert sorted(parse_sizes(p, ["7"]).values()) == [7, 7]
    dims = parse_sizes(p, ["A.rows=3", "A.cols=5"])
    assert {p.dims[d].name: s for d, s in dims.items()} == {"A.rows": 3, "A.cols": 5}
    with pytest.raises(kfuse.KfuseError, match="no size for"):
        parse_sizes(p, ["A.rows=3"])
    with pytest.raises(kfuse.KfuseError, match="the script's sizes are"):
        parse_sizes(p, ["zz=3"])


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "kfuse", "compile", str(ROOT / "examples" / "sscal.kf")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "scal_compute" in proc.stdout
