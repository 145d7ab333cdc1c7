"""The fused op kinds of a llama block on NVIDIA (issue 43 item 2): every solution of add_rmsnorm, rope and gated
passes the F4 gate at odd shapes, gated also on the two halves of one concatenated weight (the one-GEMM path), and
a torch caller's CUDA tensors through ``arbiter.torch`` get torch's answer."""
from __future__ import annotations

import numpy as np
import pytest

from arbiter.ops.add_rmsnorm import AddRMSNorm
from arbiter.ops.rope import Rope
from arbiter.regions import Gated
from gpu_support import check_builtin_solution, nvidia_solutions, requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]
DTYPES = ["float32", "float16"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 129), (33, 1000), (3, 4097)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cand,params", nvidia_solutions("add_rmsnorm"))
def test_add_rmsnorm_solution_passes_the_gate(cand, params, shape, dtype):
    rows, cols = shape
    check_builtin_solution(cand, params, AddRMSNorm.random("nvidia", dtype, {"rows": rows, "cols": cols},
                                                           rng=np.random.default_rng(20)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 17, 64), (8, 33, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cand,params", nvidia_solutions("rope"))
def test_rope_solution_passes_the_gate(cand, params, shape, dtype):
    rows, seq, dim = shape
    check_builtin_solution(cand, params, Rope.random("nvidia", dtype, {"rows": rows, "seq": seq, "dim": dim},
                                                     rng=np.random.default_rng(21)))


def _halves(k, n, linear):
    import cupy as cp

    rng = np.random.default_rng(22)
    if linear:  # a torch Linear weight [2N, K]: its row blocks, transposed
        w = cp.asarray((rng.standard_normal((2 * n, k)) / np.sqrt(k)).astype(np.float32))
        return w[:n].T, w[n:].T
    w = cp.asarray((rng.standard_normal((k, 2 * n)) / np.sqrt(k)).astype(np.float32))
    return w[:, :n], w[:, n:]


@pytest.mark.parametrize("how", ["apart", "columns", "linear"])
@pytest.mark.parametrize("cand,params", nvidia_solutions("gated"))
def test_gated_solution_passes_the_gate_on_one_concatenated_weight(cand, params, how):
    import cupy as cp

    if how == "apart":
        region = Gated.random("nvidia", "float32", {"m": 37, "n": 29, "k": 70}, rng=np.random.default_rng(23))
    else:
        w_gate, w_up = _halves(70, 29, how == "linear")
        x = cp.asarray(np.random.default_rng(24).standard_normal((37, 70)).astype(np.float32))
        region = Gated(x, w_gate, w_up)
        assert ("shares", "w_up>w_gate") in region.attrs, region.attrs
    check_builtin_solution(cand, params, region)


def test_torch_cuda_callers_get_torchs_answer():
    torch = pytest.importorskip("torch")
    import arbiter.torch as at

    g = torch.Generator(device="cuda").manual_seed(0)
    x, res = (torch.randn(2, 9, 256, device="cuda", generator=g) for _ in range(2))
    w = torch.randn(256, device="cuda", generator=g)
    w_gu = torch.randn(2 * 48, 256, device="cuda", generator=g) / 16
    for _ in range(3):  # the first call learns the signature; later ones take the fast path
        s, y = at.OPS["add_rmsnorm"](x, res, w, 1e-6)  # [2, *x.shape]: the sum and the normed rows
        torch.testing.assert_close(s, x + res)
        want = (x + res) * torch.rsqrt((x + res).pow(2).mean(-1, keepdim=True) + 1e-6) * w
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
        gate, up = torch.nn.functional.linear(x, w_gu).chunk(2, -1)
        torch.testing.assert_close(at.gated(x, w_gu[:48].T, w_gu[48:].T), torch.nn.functional.silu(gate) * up,
                                   rtol=1e-4, atol=1e-4)
