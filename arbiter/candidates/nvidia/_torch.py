"""PyTorch as a vendor library on NVIDIA: availability, the caller's tensors, and where results go.

A torch caller's tensors are used as they are (``region.torch_in``): no DLPack conversion on the call.
A CuPy caller's arrays are seen through zero-copy DLPack views. A result goes into ``region.out`` when
one was given (the gate's poisoned buffer, or the caller's), else it is returned as it is: the tensor
torch allocated (its caching allocator) for a torch caller, a zero-copy CuPy view of it for a CuPy one.

The cpu target reuses these candidates (``arbiter/candidates/cpu/torch_*.py``): there a region's arrays are
NumPy arrays, seen through ``torch.from_numpy`` and given back through ``Tensor.numpy()``, both zero-copy.
"""
from __future__ import annotations

from arbiter import targets
from arbiter.candidates import Tier
from arbiter.candidates.nvidia._cuda import NvidiaCandidate
from arbiter.targets.nvidia import torch_reason, torch_view


def torch_available() -> bool | str:
    """True when the nvidia target is available and PyTorch computes on its device; else why not."""
    ok = targets.get("nvidia").available()
    if ok is not True:
        return ok
    reason = torch_reason()
    return True if reason is True else f"{reason}; install kernel-arbiter[torch] (a CUDA build)"


def view(array):
    """A torch tensor sharing ``array``'s memory: itself when it is one (the target's arrays are torch tensors
    where CuPy is absent), else through DLPack, no copy."""
    if type(array).__module__.startswith("torch"):
        return array
    if type(array).__module__ == "numpy":  # the cpu target's arrays
        import torch

        return torch.from_numpy(array)
    return torch_view(array)


def tensor(region, name: str):
    """The operand ``name`` as a torch tensor: the caller's own when it passed one, else a DLPack view."""
    given = region.torch_in
    if given is not None:
        found = given.get(name)
        if found is not None:
            return found
    return view(getattr(region, name))


def gemm_bias(region):
    """The bias as a torch tensor for a cuBLASLt bias epilogue (``addmm``, ``_addmm_activation``): a copy where a
    CUDA bias does not start on a 16-byte boundary. cuBLASLt's alignment preferences cover A, B, C and D, not the
    bias, so its kernel may load the bias 16 bytes at a time and fault on a misaligned address (poisoning the
    process's CUDA context); pytorch/pytorch#194497. The copy is N elements, on misaligned calls only."""
    bias = tensor(region, "bias")
    if bias.is_cuda and bias.data_ptr() % 16:
        return bias.clone()
    return bias


def out_tensor(region):
    """``region.out`` as a torch tensor (the caller's own when it passed one, or the target's own)."""
    given = region.torch_in
    if given is not None and "out" in given:
        return given["out"]
    return view(region.out)


def new_out(region, shape, like):
    """The tensor a torch candidate writes its result into: the given ``out=``; on the cpu target a view of the
    region's own new output (NumPy's allocation, which asks for huge pages: a fresh 64 MiB output first-touched in
    7.7 ms against 18.5 ms from torch's CPU allocator on the 2-core box); else a new tensor like ``like``."""
    if region.out is not None:
        return out_tensor(region)
    if region.target == "cpu" and region.torch_in is None:  # (a torch caller's own tensors: torch's allocator)
        return view(region.alloc_out())
    import torch

    return torch.empty(shape, dtype=like.dtype, device=like.device)


def deliver(region, y):
    """The candidate's output for torch result ``y``: copied into ``region.out`` when one was given,
    else ``y`` itself for a torch caller, else a zero-copy CuPy view of ``y`` (no extra pass)."""
    if region.out is not None:
        out_tensor(region).copy_(y)
        return region.out
    if region.torch_in is not None:
        return y  # a torch caller's (its CUDA tensors, or its CPU tensors on arbiter.torch's fast path)
    if region.target == "cpu":
        return y.numpy()
    if targets.get("nvidia").arrays == "torch":  # type: ignore[attr-defined]
        return y  # the target's own array type (no CuPy)
    from arbiter.targets.nvidia import cupy_view

    return cupy_view(y)


class TorchCandidate(NvidiaCandidate):
    """A PyTorch op as a vendor candidate: available when the nvidia target is and torch sees CUDA.
    Priority 5 puts it after the CuPy vendor candidates within the tier (tier order only; measurement decides).
    ``torch_native``: it runs on torch's current stream and takes torch tensors as they are."""

    tier = Tier.HAND_TUNED
    priority = 5
    torch_native = True

    def available(self):
        return torch_available()
