"""Regions validate once, name the argument at fault, and key without reading data."""
import numpy as np
import pytest

from arbiter import RegionError
from arbiter.keys import POW2, ProblemKey, edge_shapes
from arbiter.regions import Matmul, RMSNorm, Softmax

f32 = np.float32


def mat(*shape, dtype=f32):
    return np.ones(shape, dtype=dtype)


@pytest.mark.parametrize("build, argument", [
    (lambda: Matmul(mat(3, 5), mat(4, 7)), "b"),
    (lambda: Matmul(mat(3, 5), mat(5, 7, dtype=np.float64)), "b"),
    (lambda: Matmul([[1.0]], mat(1, 1)), "a"),
    (lambda: Matmul(mat(3, 5, dtype=np.int32), mat(5, 7, dtype=np.int32)), "a"),
    (lambda: Matmul(mat(5), mat(5, 7)), "a"),  # N-D a is rows of a batch (issue 29); 1-D is refused
    (lambda: Matmul(mat(3, 5), mat(5)), "b"),
    (lambda: Matmul(mat(3, 5), mat(5, 7), bias=mat(6)), "bias"),
    (lambda: Matmul(mat(3, 5), mat(5, 7), bias=mat(7, dtype=np.float64)), "bias"),
    (lambda: Matmul(mat(3, 5), mat(5, 7), residual=mat(7, 3)), "residual"),
    (lambda: Matmul(mat(3, 5), mat(5, 7), activation="tanh"), "activation"),
    (lambda: Matmul(mat(3, 5), mat(5, 7), out=mat(3, 6)), "out"),
    (lambda: Matmul(mat(3, 5), mat(5, 7), out=np.asfortranarray(mat(3, 7))), "out"),
    (lambda: Softmax(mat(4, 4), axis=2), "axis"),
    (lambda: Softmax(mat(4, 4), axis=1.0), "axis"),
    (lambda: Softmax(np.float32(3.0)), "x"),
    (lambda: RMSNorm(mat(4, 8), mat(7)), "weight"),
    (lambda: RMSNorm(mat(4, 8), mat(8), eps=0.0), "eps"),
    (lambda: RMSNorm(mat(4, 8), mat(8), eps=float("nan")), "eps"),
    (lambda: RMSNorm(mat(4, 8), mat(8, dtype=np.float16)), "weight"),
])
def test_bad_input_names_the_argument(build, argument):
    with pytest.raises(RegionError) as err:
        build()
    assert err.value.argument == argument
    assert str(err.value).startswith(argument + ":")


def test_key_fields_and_round_trip():
    r = Matmul(mat(33, 65), mat(65, 1), bias=mat(1), activation="gelu_tanh")
    k = r.key
    assert (k.target, k.op, k.dtype, k.layout) == ("cpu", "matmul", "float32", "RR")
    assert dict(k.attrs) == {"activation": "gelu_tanh", "bias": "1", "residual": "0"}
    assert dict(k.bucket) == {"m": 64, "n": 1, "k": 128}
    assert ProblemKey.parse(k.id) == k


def test_key_ignores_data_and_eps_but_not_layout():
    a, b = np.random.rand(20, 30).astype(f32), np.random.rand(30, 10).astype(f32)
    assert Matmul(a, b).key == Matmul(a * 0 + np.nan, b + 5).key
    assert Matmul(np.asfortranarray(a), b).key.layout == "CR"
    assert Matmul(a[:, ::2], b[::2]).key.layout == "SS"
    assert RMSNorm(mat(4, 8), mat(8), eps=1e-5).key == RMSNorm(mat(4, 8), mat(8), eps=1e-3).key
    assert Softmax(mat(4, 8), axis=0).key != Softmax(mat(4, 8), axis=1).key


def test_pow2_buckets_and_edges():
    assert [POW2.bound(n) for n in (0, 1, 2, 3, 4, 5, 8, 9, 1000, 1024, 1025)] == \
        [0, 1, 2, 4, 4, 8, 8, 16, 1024, 1024, 2048]
    assert POW2.edges(1024) == (513, 1024)
    assert edge_shapes((("m", 64), ("n", 1)), {}) == [{"m": 33, "n": 1}, {"m": 64, "n": 1}]


def test_softmax_rows_cols_for_any_axis():
    r = Softmax(mat(2, 3, 5), axis=1)
    # a 3-D x is its own key (issue 25: a kernel may take rows as shape[0]): layouts=x-R3, and the axis by its
    # place (issue 38: probed there)
    assert r.dims == {"rows": 10, "cols": 3} and dict(r.key.attrs) == {"axis": "inner1", "layouts": "x-R3"}


def test_random_regions_are_never_zero_and_keep_layout():
    r = Matmul.random("cpu", "float32", {"m": 9, "n": 7, "k": 5}, {"bias": "1"}, layout="CR")
    assert r.key.layout == "CR" and np.all(r.a != 0) and np.all(r.bias != 0)
    s = Softmax.random("cpu", "float64", {"rows": 5, "cols": 6}, layout="S")
    assert s.key.layout == "S" and s.x.shape == (5, 6)


def test_torch_tensors_get_the_layout_classes_and_dtype_names_numpy_arrays_get():
    """A torch caller's region is keyed from the tensors themselves: the same key as the same arrays in NumPy."""
    torch = pytest.importorskip("torch")
    from arbiter.keys import layout_class
    from arbiter.regions import dtype_name

    base = np.arange(6 * 8 * 4, dtype=np.float32).reshape(6, 8, 4)
    t = torch.from_numpy(base.copy())
    cases = [lambda a: a, lambda a: a[1:3], lambda a: a[:, ::2], lambda a: a[:, :, :1], lambda a: a[:0],
             lambda a: a[0].T, lambda a: a[2, :, 1], lambda a: a[:, 3:4, :].swapaxes(0, 2)]
    for make in cases:
        assert layout_class(make(t)) == layout_class(make(base)), make(base).strides
    for name in ("float16", "bfloat16", "float32", "float64"):
        assert dtype_name(getattr(torch, name)) == name
