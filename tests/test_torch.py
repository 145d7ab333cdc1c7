"""arbiter.torch: every op kind as a torch.library custom op, dispatched through the arbiter, with fake
kernels (torch.compile(fullgraph=True)), bfloat16, autograd through the reference formulation, CPU and
CUDA tensors (issue 16, PyTorch first class)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import arbiter  # noqa: E402
import arbiter.torch as at  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cases(device="cpu", dtype=torch.float32):
    """(op, args) for every op kind, with small odd shapes."""
    g = torch.Generator().manual_seed(0)

    def r(*shape, dt=dtype):
        return torch.randn(*shape, generator=g, dtype=torch.float32).to(device, dt)

    x = r(6, 40)
    return [
        ("matmul", (r(9, 24), r(24, 7), r(7), r(9, 7), "gelu")),
        ("matmul", (r(9, 24), r(24, 7), None, None, "none")),
        ("softmax", (x, -1)),
        ("rmsnorm", (x, r(40), 1e-6)),
        ("layernorm", (x, r(40), r(40), 1e-5)),
        ("attention", (r(1, 2, 5, 16), r(1, 2, 7, 16), r(1, 2, 7, 16), True, None)),
        ("gated", (r(9, 24), r(24, 12), r(24, 12))),
        ("pointwise", (x, "mul[t]>add[s]>relu>tanh", [r(6, 40)], [0.5])),
    ] + ([("fft", (torch.randn(3, 20, generator=g, dtype=torch.complex64).to(device), "c2c", False, None)),
          ("fft", (r(3, 20), "r2c", False, None))] if dtype != torch.bfloat16 else [])


def ids(all_cases):
    return [f"{op}-{i}" for i, (op, _) in enumerate(all_cases)]


@pytest.mark.parametrize("op, args", cases(), ids=ids(cases()))
def test_every_op_kind_dispatches_through_the_arbiter(op, args):
    y = getattr(torch.ops.arbiter, op)(*args)
    expected = at.REFERENCE[op](*args)
    assert y.shape == expected.shape and y.dtype == expected.dtype and y.device == expected.device
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)
    [row] = [r for r in arbiter.stats() if r["op"] == op]
    assert row["misses"] == 1  # decided (gate + choice) by the arbiter, then served


@pytest.mark.parametrize("op, args", cases(dtype=torch.bfloat16), ids=ids(cases(dtype=torch.bfloat16)))
def test_bfloat16_tensors(op, args):
    y = getattr(at, op)(*args)
    assert y.dtype == torch.bfloat16
    up = [a.float() if torch.is_tensor(a) else [t.float() for t in a] if isinstance(a, list) and a and
          torch.is_tensor(a[0]) else a for a in args]
    torch.testing.assert_close(y.float(), at.REFERENCE[op](*up), rtol=2e-2, atol=2e-2)
    # NumPy has no bfloat16: on the CPU the arbiter computes the key in float32, then rounds
    assert any(":float32:" in r["key"] for r in arbiter.stats() if r["op"] == op)


@pytest.mark.parametrize("op, args", cases(dtype=torch.float64), ids=ids(cases(dtype=torch.float64)))
def test_requires_grad_inputs_get_the_reference_gradients(op, args):
    def leaves(values):
        out = []
        for a in values:
            if (torch.is_tensor(a) and a.is_floating_point()) or (torch.is_tensor(a) and a.is_complex()):
                out.append(a.detach().clone().requires_grad_())
            elif isinstance(a, list) and a and torch.is_tensor(a[0]):
                out.append([t.detach().clone().requires_grad_() for t in a])
            else:
                out.append(a)
        return out

    def flat(values):
        return [t for a in values for t in (a if isinstance(a, list) else [a]) if torch.is_tensor(t)]

    mine, ref = leaves(args), leaves(args)
    y, expected = getattr(at, op)(*mine), at.REFERENCE[op](*ref)
    weight = torch.randn(y.shape, dtype=y.dtype)  # a sum alone has zero gradient through softmax
    (y * weight).abs().sum().backward()
    (expected * weight).abs().sum().backward()
    for got, want in zip(flat(mine), flat(ref)):
        assert got.grad is not None
        # (the fft case is complex64: |y| weighs the gradient, and the forward passes differ by rounding)
        tol = dict(rtol=1e-4, atol=1e-5) if got.dtype == torch.complex64 else dict(rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(got.grad, want.grad, **tol)


class Block(torch.nn.Module):
    def __init__(self, width=32, hidden=48):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.norm = torch.nn.Parameter(torch.rand(width, generator=g) + 0.5)
        self.w_gate = torch.nn.Parameter(torch.randn(width, hidden, generator=g) / width ** 0.5)
        self.w_up = torch.nn.Parameter(torch.randn(width, hidden, generator=g) / width ** 0.5)
        self.w_down = torch.nn.Parameter(torch.randn(hidden, width, generator=g) / hidden ** 0.5)
        self.b_down = torch.nn.Parameter(torch.randn(width, generator=g))

    def forward(self, x):
        h = torch.ops.arbiter.rmsnorm(x, self.norm, 1e-6)
        h = torch.ops.arbiter.gated(h, self.w_gate, self.w_up)
        h = torch.ops.arbiter.matmul(h, self.w_down, self.b_down, x, "silu")
        return torch.ops.arbiter.softmax(h * 2.0, -1)

    def reference(self, x):
        h = at.ref_rmsnorm(x, self.norm, 1e-6)
        h = at.ref_gated(h, self.w_gate, self.w_up)
        h = at.ref_matmul(h, self.w_down, self.b_down, x, "silu")
        return at.ref_softmax(h * 2.0, -1)


def check_compiled_block(device, dtype, backend="inductor"):
    torch._dynamo.reset()
    block = Block().to(device, dtype)
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    x = torch.randn(17, 32, generator=torch.Generator().manual_seed(2)).to(device, dtype)
    y = compiled(x)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y, block.reference(x), **tol)
    y[:, :3].sum().backward()
    mine = {n: p.grad.clone() for n, p in block.named_parameters()}
    block.zero_grad()
    block.reference(x)[:, :3].sum().backward()
    for name, p in block.named_parameters():
        torch.testing.assert_close(mine[name], p.grad, **tol)
    for _ in range(3):
        compiled(x)
    served = {r["op"]: r for r in arbiter.stats()}
    assert set(served) == {"rmsnorm", "gated", "matmul", "softmax"}
    assert all(r["hits"] + r["misses"] == 4 for r in served.values()), served  # dispatched at run time
    return y


def test_a_module_using_the_ops_compiles_with_fullgraph_and_dispatches_at_run_time():
    y = check_compiled_block("cpu", torch.float32)  # the default backend (inductor)
    print(f"\ncompiled Block: output {tuple(y.shape)} {y.dtype}; served: "
          + ", ".join(f"{r['op']}->{r['solution']} ({r['hits']} hits, {r['misses']} miss)" for r in arbiter.stats()))


def test_compiled_module_in_bfloat16():
    check_compiled_block("cpu", torch.bfloat16, backend="aot_eager")


@pytest.mark.gpu
def test_cuda_tensors_compiled_module_and_bfloat16():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    for dtype in (torch.float32, torch.bfloat16):
        arbiter.dispatch.reset()
        y = check_compiled_block("cuda", dtype)
        assert y.device.type == "cuda" and y.dtype == dtype
        assert all(r["target"] == "nvidia" for r in arbiter.stats())
    for op, args in cases("cuda"):
        torch.testing.assert_close(getattr(at, op)(*args), at.REFERENCE[op](*args), rtol=1e-3, atol=1e-3)


def test_bad_input_names_the_argument():
    with pytest.raises(arbiter.RegionError, match="^b: shape"):
        at.matmul(torch.randn(4, 5), torch.randn(6, 3))
    with pytest.raises(ValueError, match="chain: step 'mul\\[t\\]' has no operand left in tensors"):
        at.pointwise(torch.randn(4), "mul[t]", [], [])


def test_torch_example_runs(tmp_path):
    env = dict(os.environ, ARBITER_DB=str(tmp_path / "registry.db"))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "torch_module.py"), "--device", "cpu"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "rows sum to 1: True" in done.stdout
    for op in ("rmsnorm", "gated", "matmul", "softmax"):
        assert f"{op} " in done.stdout and "hits 9 misses 1" in done.stdout
