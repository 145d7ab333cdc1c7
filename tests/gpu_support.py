"""GPU presence for tests (imported by name: `pythonpath = ["tests"]` in pyproject.toml)."""
from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


requires_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU with CuPy here")


def nvidia_solutions(op: str) -> list:
    """Every NVIDIA solution (candidate x parameter set) of ``op`` as pytest params ``cand, params`` named
    ``<candidate><index>``; none without a GPU."""
    if not gpu_available():
        return []
    from arbiter.candidates import REGISTRY

    return [pytest.param(c, p, id=f"{c.name}{i}") for c in REGISTRY.candidates("nvidia", op)
            for i, p in enumerate(c.param_space())]


@functools.lru_cache(maxsize=1)
def _documented_text() -> str:
    """The source of every candidate module: a documented decline is one whose reason is written there."""
    import pathlib

    import arbiter.candidates

    root = pathlib.Path(arbiter.candidates.__file__).parent
    return "\n".join(p.read_text() for p in root.rglob("*.py"))


def check_builtin_solution(cand, params, region) -> None:
    """Gate one built-in solution. A built-in that is unavailable fails (a kernel that stops compiling must
    not turn into a skip), except when the optional package it documents (PyTorch, nvmath-python, Triton) is not
    installed; a decline is allowed only with a reason written in the candidate code (``applies_to``), never an
    error text."""
    import importlib.util

    from arbiter.verify import verify

    ok = cand.available()
    if ok is not True:
        optional_missing = any(name in str(ok).lower() and importlib.util.find_spec(name) is None
                               for name in ("torch", "nvmath", "triton"))
        if optional_missing:
            pytest.skip(f"optional package missing: {ok}")
        pytest.fail(f"built-in {cand.name} is unavailable on a machine with a GPU: {ok}")
    applies = cand.applies_to(region)
    if applies is not True:
        assert isinstance(applies, str) and applies, f"{cand.name} declined without a reason"
        assert "rror" not in applies, f"{cand.name} declined with an error, not a documented reason: {applies}"
        # the reason's first word names what it is about ("dtype ...", "length ...", "layout ..."): it must be
        # written in the candidate's code; values after it are formatted in at run time
        lead = applies.replace(":", " ").split()[0]
        assert lead in _documented_text().replace(":", " "), \
            f"{cand.name} declined with a reason its applies_to does not document: {applies}"
        pytest.skip(f"does not apply (documented): {applies}")
    verdict = verify(cand, params, region)
    assert verdict.passed, f"{cand.name}{params} at {region}: {verdict.reason}"
