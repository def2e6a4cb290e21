"""The CUDA module holds only the library routines its kernels reach, with right line numbers (CPU)."""
import re

import kfuse
from kfuse.codegen.module import used_routines

from conftest import ROOT

LIB = """#define TWICE(x) helper_b(x)
// a helper
KF_DEVICE int helper_a(int x) { return x + 1; }

KF_DEVICE int helper_b(int x) { return x * 2; }

// used by the kernel
template <int BY, class V>
KF_DEVICE void used(V& v) { v = helper_a(v); }

// never used
template <int BY, class V>
KF_DEVICE void unused(V& v) {
    v = 0;
}
KF_DEVICE int last(int x) { return x; }
"""


def test_only_reached_routines_are_kept_and_lines_stay_right():
    out = used_routines(LIB, "used<4>(x);", "lib/x.cu")
    assert "helper_a" in out and "helper_b" in out            # through the body, through a macro
    assert "unused" not in out and "never used" not in out and "last(" not in out
    # the dropped tail becomes a #line directive to the file's line after the dropped text
    assert out.rstrip().endswith('#line 17 "lib/x.cu"')
    assert LIB.splitlines()[7] in out.splitlines()


def test_gemver_module_pastes_only_its_routines():
    prog = kfuse.compile(ROOT / "examples" / "gemver.kf", tuned=False)
    src = prog.cuda_source() if callable(prog.cuda_source) else prog.cuda_source
    lib_text = (prog.library.root / "blas2.cu").read_text()
    defined = set(re.findall(r"KF_DEVICE \w+ (\w+)\(", lib_text))
    pasted = {n for n in defined if re.search(rf"KF_DEVICE \w+ {n}\(", src)}
    assert pasted and len(pasted) < len(defined) / 2
    kernels = "\n".join(k.source for k in prog.kernels)
    assert all(re.search(rf"\b{n}\b", src.replace(f" {n}(", " ", 1)) for n in pasted)
    assert any(re.search(rf"\b{n}\b", kernels) for n in pasted)
