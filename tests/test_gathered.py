"""Inputs read beyond their element (``reach = "neighbours"`` or ``"any"``): the library format,
the fusion rule that keeps their producer in an earlier kernel, the transfer model's bytes and
the generated code (CPU; nvcc compiles it)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import kfuse
from kfuse.errors import LibraryError
from kfuse.library.loader import load_library

from test_library import META, dot_function, dump_functions, load_error, scal_function

STENCIL_CU = r"""
// out_e = u_(e-1) - 2 u_e + u_(e+1), entries past either end read as 0 (a 1-D Laplacian)
template <class VO>
KF_DEVICE void lap1_compute(const KfIx& ix, const KfVec& u, VO& out) {
#pragma unroll
    for (int k = 0; k < VO::slots; ++k) {
        const long long e = ix.i * KF_SUB + ix.tx + 32 * k;
        out(k) = (e > 0 ? u.get(e - 1, real(0)) : real(0)) - real(2) * u.get(e, real(0)) + u.get(e + 1, real(0));
    }
}
"""


def lap1_function(reach: str = "neighbours") -> dict:
    return {
        "name": "lap1",
        "kind": "map",
        "params": [
            {"name": "u", "type": "vector", "dir": "in", "index": ["i"], "reach": reach},
            {"name": "out", "type": "vector", "dir": "out", "index": ["i"]},
        ],
        "variant": [{
            "name": "warp", "source": ["stencil.cu", "fn.cu"], "threads": [32, 1],
            "instances_per_block": [1, 2, 4, 8, 16, 32],
            "routines": [
                {"name": "compute", "fn": "lap1_compute", "args": ["&u", "out:w:lane"]},
                {"name": "store_out", "fn": "blas1_store", "args": ["out:r:lane", "&out"]},
            ],
        }],
    }


def stencil_library(root, functions=None):
    """A library of lap1, a scal copy and a dot copy, with real routines (nvcc compiles them)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "library.toml").write_text(META)
    (root / "fn.toml").write_text(dump_functions(functions or [lap1_function(), scal_function(), dot_function()]))
    (root / "fn.cu").write_bytes((Path(kfuse.__file__).parent / "blas" / "blas1.cu").read_bytes())
    (root / "stencil.cu").write_text(STENCIL_CU)
    return root


def test_reach_is_loaded_and_the_input_has_no_element(tmp_path):
    lib = load_library(stencil_library(tmp_path / "lib"), shipped=False)
    u = lib.overloads("lap1")[0].params[0]
    assert u.reach == "neighbours" and u.gathered and not u.on_chip


@pytest.mark.parametrize("change, field, words", [
    (lambda f: f["params"][0].update(reach="halo"), "reach", "is not one of element, neighbours, any"),
    (lambda f: f["params"][1].update(reach="any"), "reach", "only vector or matrix inputs"),
    (lambda f: f["variant"][0]["routines"][0].update(args=["out:w:lane"]), "routines", "no compute routine reads u"),
    (lambda f: f["variant"][0]["routines"].insert(0, {"name": "load_u", "fn": "blas1_load",
                                                       "args": ["&u", "u:w:lane"]}), "load_u", "not an on-chip"),
])
def test_bad_reach_metadata_is_refused_at_load(tmp_path, change, field, words):
    f = lap1_function()
    change(f)
    err = load_error(stencil_library(tmp_path / "lib", [f, scal_function()]))
    assert isinstance(err, LibraryError) and field in str(err) and words in str(err)


def test_a_global_view_in_a_compute_routine_is_still_refused_for_element_inputs(tmp_path):
    f = lap1_function(reach="element")
    f["variant"][0]["routines"].insert(0, {"name": "load_u", "fn": "blas1_load", "args": ["&u", "u:w:lane"]})
    err = load_error(stencil_library(tmp_path / "lib", [f]))
    assert "works on chip only" in str(err)


SCRIPT = """vector u, v, w;
scalar a, s;
input u, a;
v = myscal(a, u);
w = lap1(v);
s = mydot(v, w);
return w, s;
"""


def test_the_producer_of_a_gathered_input_runs_in_an_earlier_kernel(tmp_path, nvcc):
    lib = load_library(stencil_library(tmp_path / "lib"), shipped=False)
    prog = kfuse.compile(SCRIPT, library=lib, calibration=False, tuned=False)
    text = prog.search.explain()
    assert "reads the neighbours of each entry of v" in text
    # the stencil and the dot of its result share a kernel; the scal that makes v does not
    groups = [sorted(kc.call.function.name for kc in k.spec.calls) for k in prog.kernels]
    assert ["lap1", "mydot"] in groups and ["myscal"] in groups, groups
    cu = tmp_path / "k.cu"
    cu.write_text(prog.cuda_source)
    subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(cu)], check=True,
                   capture_output=True)
    assert "g_v" in prog.cuda_source and "lap1_compute(" in prog.cuda_source


def test_a_gathered_input_counts_as_one_pass_in_the_transfer_model(tmp_path):
    from kfuse.cost.transfer import gathered_values
    lib = load_library(stencil_library(tmp_path / "lib"), shipped=False)
    prog = kfuse.compile("vector u, w;\ninput u;\nw = lap1(u);\nreturn w;\n", library=lib,
                         calibration=False, tuned=False)
    (k,) = prog.kernels
    assert len(gathered_values(k)) == 1
