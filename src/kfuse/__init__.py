"""kfuse: automatic kernel fusion of map/reduce elementary functions into CUDA."""
from .compiled import CompiledScript
from .api import compile
from .errors import CompileError, FusionError, KfuseError, LaunchError, LibraryError, ScriptError, TraceError
from .frontend.trace import lib, outer, sqrt
from .decorator import JitFunction, jit
from .library.loader import load_library
from .loops import LoopState, LoopWarning, fori_loop, while_loop
from .loopexplain import explain_loop
from .runtime.csr import CSR
from . import notices

notices.install()           # notices as ``kfuse: ...`` on stderr where the program configured no logging

__version__ = "0.1.0"
__all__ = ["compile", "CompiledScript", "jit", "JitFunction", "lib", "outer", "sqrt", "load_library",
           "fori_loop", "while_loop", "explain_loop", "LoopState", "LoopWarning", "CSR",
           "KfuseError", "ScriptError", "TraceError", "LibraryError", "FusionError", "CompileError", "LaunchError",
           "__version__"]
