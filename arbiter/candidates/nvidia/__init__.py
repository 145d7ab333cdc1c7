"""Candidates of the ``nvidia`` target, one module each (every module not starting with "_" is imported on
first use). Kernel templates are the ``.cu`` files beside them; ``_cuda.py`` compiles them with NVRTC."""
