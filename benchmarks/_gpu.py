"""What the GPU benchmarks share: whether this machine can run them (imported by name; the scripts' folder is
on ``sys.path`` when one runs)."""
from __future__ import annotations


def cannot_run(script: str, why_torch: str = "") -> bool:
    """True (after saying why) unless the nvidia target is available and PyTorch sees a CUDA device: these
    benchmarks measure against torch in the same run. ``why_torch`` says what torch is there for."""
    from arbiter import targets

    ok = targets.get("nvidia").available()
    if ok is not True:
        print(f"{script}: skipped, the nvidia target is unavailable ({ok})")
        return True
    try:
        import torch
    except ImportError:
        print(f"{script}: skipped, torch is not installed{f' ({why_torch})' if why_torch else ''}")
        return True
    if not torch.cuda.is_available():
        print(f"{script}: skipped, torch sees no CUDA device")
        return True
    return False
