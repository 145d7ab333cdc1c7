"""torch.compile sees the winner on the CPU (issue 43 item 1): an ``arbiter.torch`` op whose key's winner for the
traced layout is torch's own kernel is traced as that kernel's torch code, so Inductor fuses it as in the plain
model; a key not decided yet is decided when traced; any other winner stays the opaque custom op, dispatched at run
time."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import arbiter.torch as at  # noqa: E402
from arbiter import dispatch  # noqa: E402
from arbiter.regions import Softmax  # noqa: E402
from softmax_support import numpy_only_softmax  # noqa: E402


def _compiled(fn, *args, dynamic=None):
    """(fn compiled with fullgraph, the call targets of its captured graphs)."""
    seen: list[str] = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic), seen


def _mlp():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 64, generator=g)
    w1, b1 = torch.randn(64, 128, generator=g) / 8, torch.randn(128, generator=g)
    w2, b2 = torch.randn(128, 64, generator=g) / 11, torch.randn(64, generator=g)
    gamma, beta = torch.rand(64, generator=g) + 0.5, torch.randn(64, generator=g)

    def mine(x):
        h = at.matmul(x, w1, bias=b1, activation="gelu")
        return at.softmax(at.layernorm(at.matmul(h, w2, bias=b2), gamma, beta), -1)

    def plain(x):
        h = F.gelu(x @ w1 + b1)
        return torch.softmax(F.layer_norm(h @ w2 + b2, (64,), gamma, beta), -1)

    return x, mine, plain, (w1, b1, w2, b2, gamma, beta)


def test_torch_winners_are_traced_as_torch_code_and_decided_when_traced():
    x, mine, plain, _ = _mlp()
    assert dispatch.route(Softmax(np.zeros((16, 64), np.float32)).key, torch_caller=True) is None
    fn, seen = _compiled(mine, x)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), plain(x), rtol=1e-4, atol=1e-5)
    assert seen and not any("arbiter" in t for t in seen), seen  # no opaque node left for Inductor
    route = dispatch.route(Softmax(np.zeros((16, 64), np.float32)).key, torch_caller=True)
    assert route is not None and route.native  # decided while tracing, as its first eager call would have


def test_gradients_through_the_traced_winners_match_torch():
    x, mine, plain, params = _mlp()
    for p in params:
        p.requires_grad_(True)
    fn, _ = _compiled(mine, x)
    fn(x).square().sum().backward()
    got = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    plain(x).square().sum().backward()
    for g, p in zip(got, params):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4)


def test_another_winner_stays_the_opaque_op(only_candidates):
    only_candidates("cpu", "softmax", numpy_only_softmax())
    x = torch.randn(8, 40)
    fn, seen = _compiled(lambda t: at.softmax(t, -1) * 2.0, x)
    torch.testing.assert_close(fn(x), torch.softmax(x, -1) * 2.0)
    assert any("arbiter.softmax" in t for t in seen), seen
    route = dispatch.route(Softmax(x.numpy()).key, torch_caller=True)
    assert route.hits + route.misses >= 1 and route.solution.candidate_name == "numpy_only_softmax"


def _targets_of(fn, dynamic, shapes):
    compiled, seen = _compiled(fn, dynamic=dynamic)
    for shape in shapes:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), torch.softmax(x, -1))
    return seen


def test_sizes_made_dynamic_after_a_recompile_are_specialized_for_the_traced_winner():
    seen = _targets_of(lambda t: at.softmax(t, -1), None, [(8, 40), (9, 40), (10, 40)])
    assert seen and not any("arbiter" in t for t in seen), seen


def test_dynamic_true_keeps_the_opaque_op():
    seen = _targets_of(lambda t: at.softmax(t, -1), True, [(8, 40), (9, 40)])
    assert any("arbiter.softmax" in t for t in seen), seen
