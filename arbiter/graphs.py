"""``capture``: a warm sequence of arbitrated calls recorded once into a CUDA graph, replayed without Python.

On small problems a GPU waits on the host: region construction, dispatch and each launch cost microseconds,
more than the kernels. A CUDA graph records the kernels of a sequence once and replays them with one launch.

    step = arbiter.capture(block, x, weights)   # runs block twice (deciding every key), then records it
    x.copy_(next_input)                          # new data goes into the captured inputs
    y = step.replay()                            # the recorded kernels; y is the captured output

What makes an arbitrated call capturable:

* Its key is decided before: deciding runs the F4 gate and maybe timing, which synchronise the device.
  ``capture`` calls the function ``warmup`` times first; a key dispatched for the first time during a capture
  raises ``CaptureMissError`` naming it (dispatch asks the target on every miss, so this holds for a
  capture made with ``torch.cuda.graph`` directly as well).
* A warm call only builds its region, looks its route up and launches: no synchronisation.
* Only capturable solutions serve under capture (``Candidate.capturable``; CuPy's cuBLAS calls refuse stream
  capture): a winner that cannot be captured is replaced, while capturing, by the best capturable solution
  of its key, prepared outside the capture (``arbiter.dispatch``; ``arbiter.stats()`` lists it with
  ``capture_standin_for``). Under policy ``tune`` the keys first decided inside ``capture`` are timed in device
  mode (a replay has no host work between kernels); eager callers' keys in stream mode.
* Memory comes from the graph's own pool: torch tensors from torch's (``torch.cuda.graph``), and while
  capturing, CuPy's allocations also come from torch's caching allocator on the capturing stream, so a CuPy
  temporary or output lives in that pool too and is not handed to anyone else between replays.
* CuPy's current stream is torch's capturing stream, so CuPy kernels and cuBLAS calls are recorded with
  the torch ones, in order.

Needs PyTorch with CUDA (its graph API and allocator pool); works for CuPy and torch callers alike. Hit
counters count the capturing call, not replays (no Python runs on a replay).
"""
from __future__ import annotations

import contextlib


class Captured:
    """A recorded sequence: ``replay()`` launches it and returns the outputs captured with it (the same
    arrays every time: copy them out before the next replay if you keep them)."""

    def __init__(self, graph, outputs):
        self.graph = graph
        self.outputs = outputs

    def replay(self):
        self.graph.replay()
        return self.outputs


def capture(fn, *args, warmup: int = 2, **kwargs) -> Captured:
    """Run ``fn(*args, **kwargs)`` ``warmup`` times (deciding every key it dispatches and compiling its kernels),
    then record one call into a CUDA graph. Inputs are read from the same arrays on every replay: write new
    data into them (``x.copy_(...)``, ``x[...] = ...``) before ``replay()``."""
    if warmup < 1:
        raise ValueError(f"warmup: {warmup} must be at least 1 (keys are decided outside the capture)")
    from arbiter.dispatch import deciding_for_capture

    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with deciding_for_capture():  # misses decide for a graph: device time, capturable stand-ins prepared
        with torch.cuda.stream(side), _cupy_follows_torch(torch, allocate=False):
            for _ in range(warmup):  # torch's recipe: warm up on a side stream, so lazy handles are made outside
                fn(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), _cupy_follows_torch(torch, allocate=True):
            outputs = fn(*args, **kwargs)
    return Captured(graph, outputs)


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError("capture: CUDA-graph capture needs PyTorch with CUDA; install kernel-arbiter[torch]") \
            from exc
    if not torch.cuda.is_available():
        raise RuntimeError(f"capture: PyTorch {torch.__version__} sees no CUDA device")
    return torch


def _cupy_follows_torch(torch, allocate: bool):
    """The kernel arrays of the target serving torch's CUDA tensors follow torch's current stream, and with
    ``allocate`` its caching allocator (inside ``torch.cuda.graph``: the graph's private pool):
    ``Target.follow_torch``. No-op where no target serves them, or its arrays are torch's own."""
    from arbiter import targets

    serving = targets.serving_torch("cuda")
    return contextlib.nullcontext() if serving is None else serving.follow_torch(torch, allocate)
