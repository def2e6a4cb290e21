import time, torch
SCHEMA = "(int target, str kinds, Tensor[] tensors, float[] numbers) -> Tensor[]"
@torch.library.custom_op("bench::a", mutates_args=(), schema=SCHEMA)
def a(target, kinds, tensors, numbers):
    return [tensors[0].new_empty(4)]
@a.register_fake
def _(target, kinds, tensors, numbers):
    return [tensors[0].new_empty(4)]
lib = torch.library.Library("bench", "FRAGMENT")
lib.define("b" + SCHEMA)
def b_impl(target, kinds, tensors, numbers):
    return [tensors[0].new_empty(4)]
lib.impl("b", b_impl, "CPU")
lib.impl("b", b_impl, "CUDA")
torch.library.register_fake("bench::b", lambda target, kinds, tensors, numbers: [tensors[0].new_empty(4)], lib=lib)
x = torch.ones(4)
def t(f, n=20000):
    for _ in range(100): f()
    s = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - s) / n * 1e6
print("custom_op eager", t(lambda: torch.ops.bench.a(1, "t", [x], [])))
print("Library.impl eager", t(lambda: torch.ops.bench.b(1, "t", [x], [])))
print("new_empty alone", t(lambda: x.new_empty(4)))
fa = torch.compile(lambda x: torch.ops.bench.a(1, "t", [x], [])[0], fullgraph=True)
fb = torch.compile(lambda x: torch.ops.bench.b(1, "t", [x], [])[0], fullgraph=True)
print("custom_op compiled", t(lambda: fa(x), 5000))
print("Library.impl compiled", t(lambda: fb(x), 5000))
y = torch.ones(4, requires_grad=True)
try:
    fb2 = torch.compile(lambda x: torch.ops.bench.b(1, "t", [x], [])[0], fullgraph=True)
    fb2(y).sum().backward(); print("backward ran?!")
except Exception as e:
    print("grad:", type(e).__name__, str(e)[:300])
