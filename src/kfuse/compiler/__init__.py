"""The compiler: ``api.py`` (``kfuse.compile``: a script's text to a compiled script), the
``pipeline.py`` stages over typed artifacts, the ``session.py`` that keeps what it made under a
complete key, and ``compiled.py``'s ``CompiledScript``, the facade a user calls."""
