"""Vendor gated projection (SwiGLU) on NVIDIA through PyTorch, as a torch user writes it:
``F.silu(x @ w_gate) * (x @ w_up)``: two cuBLAS GEMMs (``torch.mm``) and torch's two elementwise kernels, on
the caller's tensors (or DLPack views of CuPy arrays), in the operands' dtype.

In half precision each step rounds once to the dtype (torch computes silu and the product in float inside
its kernels): the GEMM results, silu(g), and the product. On an H200 that passed the gate's half-precision
budgets at every shape probed, 1x1x1 to 2048x5632x2048 (worst rel_fro 1.0e-03 in float16, 5.0e-03 in
bfloat16; docs/budgets.md, "Composite ops"). Where it does not, ``torch_gated_float`` (silu(g) * u in float,
rounded once) is next in the tier. Into a given out (the gate's) the product is written through ``out=``;
otherwise torch's own output is returned, no extra pass. Where the two weights are the halves of one concatenated
gate/up weight (``keys.follows``: a model's fused ``gate_up_proj``), one ``torch.mm`` of twice the width on it, as
the model's own ``F.linear(x, w).chunk(2, -1)`` runs.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, new_out, out_tensor, tensor, view
from arbiter.keys import concatenated


class TorchGated(TorchCandidate):
    name = "torch_gated"
    op = "gated"

    def run(self, region, params):
        import torch

        x = tensor(region, "x")
        # the halves of one gate/up weight: one GEMM of twice the width (x read once). A torch caller's own tensors
        # hold their whole storage; DLPack and from_numpy views only their own bounds, so those are viewed whole
        whole = concatenated(tensor(region, "w_gate"), tensor(region, "w_up")) if region.torch_in is not None \
            else _viewed(concatenated(region.w_gate, region.w_up))
        if whole is not None:
            n = region.dims["n"]
            z = torch.mm(x, whole)
            gate, up = z[:, :n], z[:, n:]
        else:
            gate, up = torch.mm(x, tensor(region, "w_gate")), torch.mm(x, tensor(region, "w_up"))
        torch.nn.functional.silu(gate, inplace=True)
        if region.out is not None:
            torch.mul(gate, up, out=out_tensor(region))
            return region.out
        if whole is None:
            return deliver(region, gate.mul_(up))
        out = new_out(region, (x.shape[0], region.dims["n"]), x)  # (gate is a strided view of z)
        torch.mul(gate, up, out=out)
        return deliver(region, out)


def _viewed(native):
    return None if native is None else view(native)


register(TorchGated())
