"""kfuse: automatic kernel fusion of map/reduce elementary functions into CUDA."""
from .compiler.compiled import CompiledScript
from .compiler.api import compile
from .errors import CompileError, FusionError, KfuseError, LaunchError, LibraryError, ScriptError, TraceError
from .frontend.trace import lib, outer, sqrt
from .jit.decorator import JitFunction, jit
from .library.loader import load_library
from .jit.loops import LoopState, LoopWarning, fori_loop, while_loop
from .jit.loopexplain import explain_loop
from .runtime.csr import CSR
from .progress import install_notices

install_notices()           # notices as ``kfuse: ...`` on stderr where the program configured no logging

__version__ = "0.1.0"
__all__ = ["compile", "CompiledScript", "jit", "JitFunction", "lib", "outer", "sqrt", "load_library",
           "fori_loop", "while_loop", "explain_loop", "LoopState", "LoopWarning", "CSR",
           "KfuseError", "ScriptError", "TraceError", "LibraryError", "FusionError", "CompileError", "LaunchError",
           "__version__"]
