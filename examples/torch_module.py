"""A PyTorch module whose kernels the arbiter chooses, compiled with torch.compile(fullgraph=True).

The arbiter's op kinds are torch.library custom ops (``torch.ops.arbiter.*``, also ``arbiter.torch.*``)
with fake kernels, so the whole forward pass is one graph; each op is dispatched through the arbiter
(gate, registry, stored winner) when the compiled module runs. Gradients flow through the reference
formulation of each op. Runs on CUDA when a GPU is present (pass --device cuda), else on the CPU.
"""
import argparse

import torch

import arbiter
import arbiter.torch  # registers torch.ops.arbiter.*


class Block(torch.nn.Module):
    """RMSNorm -> SwiGLU MLP -> projection with a fused bias + residual epilogue -> softmax."""

    def __init__(self, width=64, hidden=128):
        super().__init__()
        self.norm = torch.nn.Parameter(torch.ones(width))
        self.w_gate = torch.nn.Parameter(torch.randn(width, hidden) / width ** 0.5)
        self.w_up = torch.nn.Parameter(torch.randn(width, hidden) / width ** 0.5)
        self.w_down = torch.nn.Parameter(torch.randn(hidden, width) / hidden ** 0.5)
        self.b_down = torch.nn.Parameter(torch.zeros(width))

    def forward(self, x):
        h = torch.ops.arbiter.rmsnorm(x, self.norm, 1e-6)
        h = torch.ops.arbiter.gated(h, self.w_gate, self.w_up)
        h = torch.ops.arbiter.matmul(h, self.w_down, self.b_down, x, "none")  # + bias + residual, fused
        return torch.ops.arbiter.softmax(h, -1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    torch.manual_seed(0)
    block = Block().to(args.device, getattr(torch, args.dtype))
    compiled = torch.compile(block, fullgraph=True)
    x = torch.randn(32, 64, device=args.device, dtype=getattr(torch, args.dtype))
    y = compiled(x)
    y[:, 0].sum().backward()  # gradients reach every parameter
    with torch.no_grad():
        for _ in range(9):
            compiled(x)
    print(f"output {tuple(y.shape)} {y.dtype} on {y.device}; rows sum to 1: "
          f"{torch.allclose(y.float().sum(-1), torch.ones(32, device=y.device), atol=1e-2)}")
    print("grad norms:", {n: round(float(p.grad.float().norm()), 4) for n, p in block.named_parameters()})
    for row in arbiter.stats():
        print(f"{row['op']:<8} {row['solution']:<28} {row['policy']:<9} hits {row['hits']} misses {row['misses']}")


if __name__ == "__main__":
    main()
