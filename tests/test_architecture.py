"""The package's shape: imports point one way (no circle between modules or between folders),
a class of many methods says why, and the design note's Architecture section names the tree's folders."""
import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "kfuse"
DESIGN = Path(__file__).resolve().parent.parent / "docs" / "design.md"


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """kfuse module -> kfuse modules it imports (at any depth: lazy imports count too)."""
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # "from . import x" and "from .pkg import module" name modules too
                targets = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                targets.append(target)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != mod and t.startswith("kfuse"):
                    graph[mod].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _is_init(mod: str) -> bool:
    return (SRC.parent / mod.replace(".", "/") / "__init__.py").exists()


def test_no_import_circle_between_modules():
    # a package's __init__ re-exporting its modules is not an edge of the data flow
    graph = {m: {t for t in ts if not (_is_init(m) and t.startswith(m + "."))} for m, ts in import_graph().items()}
    assert _cycles(graph) == []


def test_no_import_circle_between_folders():
    folder = {}
    for m in import_graph():
        parts = m.split(".")
        folder[m] = ".".join(parts[:2]) if len(parts) > 2 or _is_init(m) else m
    graph: dict[str, set[str]] = {}
    for m, ts in import_graph().items():
        graph.setdefault(folder[m], set()).update(folder[t] for t in ts if folder[t] != folder[m])
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_classes_of_many_methods_say_why():
    """A class of more than 12 public methods says in its docstring why it has that many ("hence
    their number"): a facade grows one property at a time (CompiledScript had 27)."""
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                public = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and not m.name.startswith("_")]
                if len(public) > 12 and "hence their number" not in " ".join((ast.get_docstring(node) or "").split()):
                    found.append(f"{_module(path)}.{node.name}: {len(public)}")
    assert found == []


def test_design_note_architecture_names_every_folder():
    text = DESIGN.read_text()
    section = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)/`", section))
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert named == folders


def test_no_private_name_imported_from_another_module():
    """A module uses another module's public names only, and imports them under their own names
    (codegen/module.py once took cusource's private regex; 22 private names once crossed modules
    and 13 public ones were renamed to private aliases)."""
    found = []
    for path in SRC.rglob("*.py"):
        mod = _module(path)
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{mod}: {target}.{a.name}")
                elif a.asname and a.asname.startswith("_"):
                    found.append(f"{mod}: {target}.{a.name} as {a.asname}")
    assert found == []


# the layers above the runtime: the planner, the compiled script and the entry points over it
ABOVE_RUNTIME = ("kfuse.fusion", "kfuse.compiler.compiled", "kfuse.compiler.api", "kfuse.jit.decorator", "kfuse.tuning", "kfuse.jit.loops",
                 "kfuse.cli.main", "kfuse.cli.util", "kfuse.cli.measure", "kfuse.bench", "kfuse.distributed",
                 "kfuse.calibration")


def _runtime_modules() -> dict[str, Path]:
    return {_module(p): p for p in sorted((SRC / "runtime").glob("*.py"))}


def test_runtime_imports_nothing_above_it():
    """The runtime runs an artifact (ir/artifact.py) it is handed; it never imports the planner,
    the compiled script or anything built on them (lazy imports count)."""
    graph = import_graph()
    found = sorted(f"{mod} imports {t}" for mod in _runtime_modules() for t in graph[mod]
                   if any(t == a or t.startswith(a + ".") for a in ABOVE_RUNTIME))
    assert found == []


def test_runtime_names_no_planner_or_compiled_script():
    """Neither code, annotations nor docstrings of the runtime name a planner or compiled-script
    type, and no function of it takes a ``compiled`` parameter or reads a ``.compiled`` attribute
    (the untyped way it once reached into CompiledScript's caches and re-planner)."""
    found = []
    for mod, path in _runtime_modules().items():
        text = path.read_text()
        found += [f"{mod} names {w}" for w in ("CompiledScript", "PlanSearch") if re.search(rf"\b{w}\b", text)]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                found += [f"{mod}: parameter {x.arg!r} of line {node.lineno}"
                          for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                          if x is not None and x.arg == "compiled"]
            elif isinstance(node, ast.Attribute) and node.attr == "compiled":
                found.append(f"{mod}: .compiled on line {node.lineno}")
    assert found == []


def test_the_runtime_is_handed_a_typed_resolve():
    """The executor takes the program, the element type and one ``Resolve`` (sizes, device
    scalars -> Artifact): the runtime's one question to the compiler, typed."""
    import inspect
    from kfuse.ir.artifact import Artifact, Resolve
    from kfuse.runtime.binding import Binding
    from kfuse.runtime.executor import Executor
    hints = inspect.get_annotations(Executor.__init__, eval_str=True)
    assert hints["resolve"] is Resolve and "compiled" not in hints
    assert inspect.get_annotations(Binding.__init__, eval_str=True)["artifact"] is Artifact
    assert inspect.get_annotations(Resolve.__call__, eval_str=True)["return"] is Artifact


RUNTIME_MAY_IMPORT = ("kfuse.ir", "kfuse.errors", "kfuse.env", "kfuse.runtime")


def test_runtime_imports_only_the_ir_errors_and_env():
    """The runtime launches what it is handed: it imports nothing of kfuse but the IR, the errors,
    the environment and itself (lazy imports count) -- no code generation, front end or planner;
    a device loop's CUDA text comes in its ``ir/loop.LoopArtifact``."""
    graph = import_graph()
    found = sorted(f"{mod} imports {t}" for mod in _runtime_modules() for t in graph[mod]
                   if not any(t == a or t.startswith(a + ".") for a in RUNTIME_MAY_IMPORT))
    assert found == []


CUDA_WORDS = ("__global__", 'extern "C"', "__device__", "typedef", "#include", "blockIdx", "threadIdx")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (a module's, class's or function's first
    statement)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def test_runtime_holds_no_cuda_text():
    """No string of the runtime's code (docstrings aside) is CUDA kernel text: the texts it
    compiles are written by code generation (``codegen/``, ``codegen/loop/``) and handed over."""
    found = []
    for mod, path in _runtime_modules().items():
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found += [f"{mod}, line {node.lineno}: {w}" for w in CUDA_WORDS if w in node.value]
    assert found == []


def test_cuda_text_scan_finds_kernel_text():
    tree = ast.parse('"""A docstring naming __global__."""\nX = \'extern "C" __global__ void k() {}\'\n')
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in _docstrings(tree)]
    assert [w for n in strings for w in CUDA_WORDS if w in n.value] == ["__global__", 'extern "C"']


def test_the_loop_runtime_is_handed_a_loop_artifact():
    """A device loop's instance takes the typed ``LoopArtifact`` (its CUDA text from the writer it
    holds, ``LoopKernelWriter``) and binds its program through the executor's public ``bind``."""
    import inspect
    from kfuse.ir.loop import LoopArtifact, LoopKernelWriter
    from kfuse.runtime.binding import Binding
    from kfuse.runtime.executor import Executor
    from kfuse.runtime.loop import Instance
    assert inspect.get_annotations(Instance.__init__, eval_str=True)["art"] is LoopArtifact
    assert inspect.get_annotations(LoopArtifact, eval_str=True)["kernels"] is LoopKernelWriter
    assert inspect.get_annotations(Executor.bind, eval_str=True)["return"] is Binding
    # Executor._bind is called by runtime/executor.py alone (its class and the bound call beside it)
    found = [f"{mod}, line {node.lineno}" for mod, path in _runtime_modules().items() if mod != "kfuse.runtime.executor"
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_bind"
             and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self")]
    assert found == []
