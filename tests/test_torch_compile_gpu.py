"""``torch.compile`` of ``arbiter::`` ops on CUDA tensors (issue 26, item 2): every op compiles under
``fullgraph=True`` with Inductor on the strided layouts a caller passes (the fakes' strides match the real op's,
or Inductor's generated code asserts them), and a llama-style block on the permuted head views that
``reshape``/``transpose`` give compiles under ``mode="reduce-overhead"`` (CUDA graphs) and replays new inputs
as eager dispatch computes them."""
import pytest

torch = pytest.importorskip("torch")

import arbiter.torch as at  # noqa: E402
from arbiter import dispatch  # noqa: E402
from test_torch_fakes import CASES  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch")]


def _cuda(a):
    """``a`` (a tensor, a list of tensors, a scalar) on the GPU with the same strides and storage offset."""
    if torch.is_tensor(a):
        base = torch.empty_strided((a.untyped_storage().nbytes() // a.element_size(),), (1,), dtype=a.dtype)
        base.copy_(torch.as_strided(a, (base.numel(),), (1,), 0))
        return torch.as_strided(base.cuda(), a.shape, a.stride(), a.storage_offset())
    if isinstance(a, list) and a and torch.is_tensor(a[0]):
        return [_cuda(t) for t in a]
    return a


@pytest.mark.parametrize("name, op, args", CASES, ids=[c[0] for c in CASES])
def test_each_op_compiles_with_inductor_and_fullgraph_on_strided_cuda_inputs(name, op, args):
    dispatch.reset()
    args = tuple(_cuda(a) for a in args)
    fn = getattr(at, op)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: fn(*a) * 2.0, fullgraph=True)
    got = compiled(*args)
    torch.testing.assert_close(got, at.REFERENCE[op](*args) * 2.0, rtol=1e-3, atol=1e-3)


HEAD, EPS = 16, 1e-6


def _heads(qkv, s, d):
    """q, k, v as [1, H, S, HEAD] views of the fused projection: permuted, not contiguous."""
    return tuple(qkv[:, i * d:(i + 1) * d].reshape(1, s, d // HEAD, HEAD).transpose(1, 2) for i in range(3))


def _block(x, w):
    s, d = x.shape
    h = at.rmsnorm(x, w["n1"], EPS)
    q, k, v = _heads(at.matmul(h, w["wqkv"]), s, d)
    o = at.attention(q, k, v, True)
    x = at.matmul(o.transpose(1, 2).reshape(s, d), w["wo"], residual=x)
    h2 = at.rmsnorm(x, w["n2"], EPS)
    return at.matmul(at.gated(h2, w["wg"], w["wu"]), w["wd"], residual=x)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_llama_block_on_permuted_heads_compiles_under_reduce_overhead(dtype):
    dispatch.reset()
    g = torch.Generator(device="cuda").manual_seed(5)
    dt = getattr(torch, dtype)
    s, d, f = 48, 64, 160

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dt)

    w = {"n1": 1 + 0.1 * r(d), "n2": 1 + 0.1 * r(d), "wqkv": r(d, 3 * d, scale=d ** -0.5),
         "wo": r(d, d, scale=d ** -0.5), "wg": r(d, f, scale=d ** -0.5), "wu": r(d, f, scale=d ** -0.5),
         "wd": r(f, d, scale=f ** -0.5)}
    torch._dynamo.reset()
    compiled = torch.compile(_block, mode="reduce-overhead", fullgraph=True)
    tol = 1e-3 if dtype == "float32" else 2e-2
    for seed in range(4):  # reduce-overhead records its CUDA graph on the third call; later calls replay it
        xi = torch.randn(s, d, generator=torch.Generator(device="cuda").manual_seed(seed), device="cuda").to(dt)
        got = compiled(xi, w).clone()
        torch.testing.assert_close(got.float(), _block(xi, w).float(), rtol=tol, atol=tol,
                                   msg=lambda m, seed=seed: f"call {seed}: {m}")
