"""Python functions compiled: ``decorator.py`` (``@kfuse.jit``: a traced function lowered to a
program and compiled per argument signature) and device loops over them (``loops.py``:
``fori_loop``/``while_loop``; ``loopsteps.py`` unrolling; ``loopexplain.py`` ``explain_loop``)."""
