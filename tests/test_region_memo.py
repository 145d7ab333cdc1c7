"""The region construction memo (``arbiter.region_memo``): a rebuilt region is the region the full path
builds, with this call's operands, and never a stale one; what the memo cannot rebuild takes the full path."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from arbiter import configure, run_arbitrated
from arbiter.errors import RegionError
from arbiter.region_memo import Memoized, slots_of
from arbiter.regions import Attention, LayerNorm, Matmul, RMSNorm, Softmax
from gpu_support import requires_gpu


def full(cls, *args, **kwargs):
    """The region as the full path builds it (memo emptied first)."""
    Memoized.recipes.clear()
    return cls(*args, **kwargs)


def same_region(a, b) -> None:
    for slot in slots_of(type(a)):
        if slot == "first_call":  # the one slot that differs: the memo marks the region of a new signature
            continue
        assert hasattr(a, slot) == hasattr(b, slot), slot
        if hasattr(a, slot):
            va, vb = getattr(a, slot), getattr(b, slot)
            assert va is vb or va == vb if not hasattr(va, "shape") else va is vb, slot


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


CASES = [
    (RMSNorm, lambda s: (rand(5, 12, seed=s), rand(12, seed=s + 1)), {"eps": 1e-5}),
    (LayerNorm, lambda s: (rand(5, 12, seed=s), rand(12, seed=s + 1), rand(12, seed=s + 2)), {}),
    (Softmax, lambda s: (rand(3, 7, seed=s),), {"axis": 0}),
    (Matmul, lambda s: (rand(6, 4, seed=s), rand(4, 9, seed=s + 1)),
     {"bias": rand(9, seed=9), "activation": "gelu"}),
    (Attention, lambda s: (rand(1, 2, 5, 8, seed=s), rand(1, 2, 7, 8, seed=s + 1), rand(1, 2, 7, 8, seed=s + 2)),
     {"causal": True}),
]


@pytest.mark.parametrize("cls, make, kwargs", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_rebuilt_region_equals_the_full_paths_with_this_calls_operands(cls, make, kwargs):
    first = full(cls, *make(0), **kwargs)
    args = make(1)
    rebuilt = cls(*args, **kwargs)  # a memo hit: same signature, other arrays
    assert Memoized.recipes  # it was recorded
    expected = full(cls, *args, **kwargs)
    same_region(rebuilt, expected)
    assert expected.first_call and not rebuilt.first_call  # a memo hit is not its signature's first call
    assert rebuilt.key is first.key
    for name, array in zip(("x", "a", "q"), args[:1]):
        assert getattr(rebuilt, {RMSNorm: "x", LayerNorm: "x", Softmax: "x", Matmul: "a", Attention: "q"}[cls]) \
            is array, name


def test_a_rebuilt_region_computes_its_own_data():
    configure(policy="tier")
    x1, w = rand(4, 16, seed=1), rand(16, seed=2)
    y1 = run_arbitrated("rmsnorm", RMSNorm(x1, w, eps=1e-6))
    x2 = rand(4, 16, seed=3)
    y2 = run_arbitrated("rmsnorm", RMSNorm(x2, w, eps=1e-6))  # same signature: the memo serves the region
    ref = x2.astype(np.float64) / np.sqrt((x2.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(y2, ref, rtol=1e-5, atol=1e-5)
    assert not np.allclose(y1, y2)


def test_scalars_are_part_of_the_signature():
    x, w = rand(4, 16), rand(16)
    assert RMSNorm(x, w, eps=1e-6).eps == 1e-6
    assert RMSNorm(x, w, eps=1e-3).eps == 1e-3
    assert RMSNorm(x, w, 1e-2).eps == 1e-2  # the same scalar given positionally
    assert Softmax(x, axis=0).axis == 0 and Softmax(x, axis=1).axis == 1
    with pytest.raises(RegionError, match="axis"):
        Softmax(x, axis=True)  # True == 1, but a bool is refused: the signature keeps the type


def test_a_failing_construction_raises_every_time():
    x = rand(4, 16)
    for _ in range(3):
        with pytest.raises(RegionError, match="weight"):
            RMSNorm(x, rand(15))
    for _ in range(2):
        with pytest.raises(RegionError, match="eps"):
            RMSNorm(x, rand(16), eps=-1.0)


def test_layouts_with_one_shape_are_distinct_signatures():
    base = rand(8, 8)
    r = Softmax(base)
    t = Softmax(base.T)  # same shape and dtype, other strides
    s = Softmax(rand(8, 16)[:, ::2])
    assert (r.layout, t.layout, s.layout) == ("R", "C", "S")
    assert len({r.key.id, t.key.id, s.key.id}) == 3


def test_the_memo_keeps_no_operand_alive():
    x, w = rand(64, 32), rand(32)
    RMSNorm(x, w)
    RMSNorm(x.copy(), w)  # recorded, then rebuilt
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None


def test_consent_to_looser_accuracy_reaches_a_memoized_signature():
    x, w = rand(4, 16), rand(16)
    plain = RMSNorm(x, w)
    try:
        configure(looser_accuracy=True)
        looser = RMSNorm(x, w)
    finally:
        configure(looser_accuracy=False)
    assert ("accuracy", "looser") in looser.attrs and ("accuracy", "looser") not in plain.attrs
    assert RMSNorm(x, w).key is plain.key


def test_out_and_sequences_take_the_full_path():
    x = rand(4, 16)
    out = np.empty((4, 16), np.float32)
    out.flags.writeable = False
    for _ in range(2):
        with pytest.raises(RegionError, match="read-only"):  # checked per call, never memoized
            Softmax(x, out=out)
    before = len(Memoized.recipes)
    from arbiter.regions import Pointwise

    Pointwise(x, [("mul", rand(4, 16)), ("relu",)])
    assert len(Memoized.recipes) == before


def test_a_converted_operand_is_not_memoized():
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 16)
    w = torch.randn(16)
    Memoized.recipes.clear()
    RMSNorm(x, w)
    assert list(Memoized.recipes.values()) == [None]  # seen as NumPy views: the full path each time
    x2 = torch.randn(4, 16)
    r = RMSNorm(x2, w)
    assert np.shares_memory(r.x, x2.numpy())


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("caller", ["cupy", "torch"])
def test_gpu_rebuilt_regions_carry_this_calls_arrays(caller):
    import cupy as cp

    if caller == "torch":
        torch = pytest.importorskip("torch")
        make = lambda seed: torch.randn(64, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))  # noqa: E731
        w = torch.rand(256, device="cuda") + 0.5
        host = lambda a: a.double().cpu().numpy()  # noqa: E731
    else:
        make = lambda seed: cp.random.default_rng(seed).standard_normal((64, 256), dtype=cp.float32)  # noqa: E731
        w = cp.random.default_rng(9).random(256, dtype=cp.float32) + 0.5
        host = lambda a: cp.asnumpy(a).astype(np.float64)  # noqa: E731
    configure(policy="tier")
    for seed in range(3):
        x = make(seed)
        region = RMSNorm(x, w, eps=1e-6)
        if caller == "torch":
            assert region.torch_in["x"] is x and region.torch_in["weight"] is w
        y = run_arbitrated("rmsnorm", region)
        xs, ws = host(x), host(w)
        ref = xs / np.sqrt((xs ** 2).mean(-1, keepdims=True) + 1e-6) * ws
        np.testing.assert_allclose(host(y), ref, rtol=1e-4, atol=1e-4)
    assert sum(r is not None for r in Memoized.recipes.values()) >= 1


def test_a_region_keeping_an_array_derived_from_its_operand_is_never_rebuilt_stale():
    """A region type (a plug-in's, say) that stores a view derived from its operand: a recipe would hand the
    next call the first call's view, so such a signature takes the full path every time."""
    from arbiter.regions import Region, dtype_name

    class Transposed(Region):
        op = "transposed_probe"
        __slots__ = ("x", "xt")

        def __init__(self, x):
            self.target, self.x, self.back = self.adopt("x", x)
            self.dtype = dtype_name(self.x.dtype)
            self.xt = self.x.T  # derived: not an argument
            self.complete("R", {"rows": x.shape[0], "cols": x.shape[1]}, ())

    first, second = rand(3, 4, seed=1), rand(3, 4, seed=2)
    Memoized.recipes.clear()
    Transposed(first)
    again = Transposed(second)
    assert list(Memoized.recipes.values()) == [None]
    assert again.xt.base is second and np.array_equal(again.xt, second.T)
