"""The shared GPU templates: the ``.cu``/``.cuh`` kernel texts every GPU target compiles (``arbiter.targets.kernels``
reads them from here, package data) and the candidate classes that launch them, registered by no one here.

A GPU target's candidates folder registers a template with its target and kernel backend, e.g.
``class RocmGemv(RocmCandidate, Gemv)`` in ``candidates/rocm/``; so ``candidates/nvidia/`` and ``candidates/rocm/``
share code through this package and neither imports the other. Not a target: nothing here is loaded by
``Registry.load_builtin``.
"""
