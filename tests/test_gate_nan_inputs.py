"""The gate's input-unchanged and repeat checks treat a NaN as equal to itself in every float type, bfloat16
included (ml_dtypes' bfloat16 is NumPy kind 'V': ``equal`` and ``array_equal`` call its NaNs different, which
gave a correct bfloat16 candidate the reason "wrote to its input" on NaN probes)."""
import numpy as np
import pytest

from arbiter.regions import Matmul
from arbiter.verify import _same_bits, changed_inputs, pristine_copy


def _bf16_region():
    pytest.importorskip("ml_dtypes")
    region = Matmul.random("cpu", "bfloat16", {"m": 5, "n": 4, "k": 3}, rng=np.random.default_rng(3))
    region.a[0, 0] = np.nan
    region.a[2, 1] = np.inf
    return region


def test_nan_in_a_bfloat16_input_is_not_a_write():
    region = _bf16_region()
    assert changed_inputs(region, pristine_copy(region)) == ""


def test_a_real_write_to_a_bfloat16_input_is_still_seen():
    region = _bf16_region()
    pristine = pristine_copy(region)
    region.a[1, 1] = 7.0
    region.a[0, 0] = 0.0  # a NaN overwritten
    assert changed_inputs(region, pristine) == "'a' (2 element(s) changed)"


def test_bfloat16_runs_with_nan_at_the_same_places_are_the_same_bits():
    region = _bf16_region()
    a = region.a
    assert _same_bits(a, a.copy())
    b = a.copy()
    b[3, 2] = -b[3, 2] if b[3, 2] != 0 else 1.0
    assert not _same_bits(a, b)
