"""Large-shape sampling whose catch probability does not depend on where the wrong elements sit (issue 38 item 6).

The stated guarantee (``verify.TILE``, ``verify.FULL_TILES``, ``verify.MISS_BOUND``): a product is compared in full on
10 random 128 x 128 output tiles, so a kernel wrong anywhere in a fraction f of the tiles is caught with probability
>= 1 - (1 - f)^10 (one wrong element in every tile: certainly); attention draws each head's own query rows, enough
that one wrong row in every 128-row tile of every head is missed with probability <= 1e-3. The hostile patterns
here put the wrong element at the same place in every tile (what a wrong tile kernel does), which the diagonal's one
residue and the random rows caught 57-65 times in 200, and attention's shared rows 13 times in 200."""
from __future__ import annotations

import math

import numpy as np
import pytest

from arbiter import verify
from arbiter.ops.kind import op_kind
from arbiter.oracles.budgets import budget_for
from arbiter.regions import Attention, Gated, Matmul
from arbiter.verify import check_output


def test_the_stated_bounds_hold():
    assert (1 - 0.5) ** verify.FULL_TILES <= verify.MISS_BOUND  # half the tiles wrong: 0.999
    for leads, sq in ((1, 4096), (8, 1024), (64, 2048), (512, 256)):
        rows = verify.attention_rows(leads, sq)
        assert rows == sq or (1 - 1 / verify.TILE) ** (rows * leads) <= verify.MISS_BOUND


def _one_wrong_per_tile(ref, at, tile=verify.TILE):
    y = ref.copy()
    y[at[0]::tile, at[1]::tile] += 1.0 + np.abs(y[at[0]::tile, at[1]::tile])
    return y


@pytest.mark.parametrize("op", ["matmul_gelu", "gated"])
@pytest.mark.parametrize("at", [(5, 77), (127, 0), (64, 64)])
def test_one_wrong_element_per_tile_at_one_place_is_caught_on_every_seed(op, at):
    rng = np.random.default_rng(3)
    dims = {"m": 512, "n": 640, "k": 520}  # over CHEAP_CHECK_WORK: sampled; 4 x 5 tiles
    region = (Matmul.random("cpu", "float32", dims, {"activation": "gelu"}, rng=rng) if op != "gated"
              else Gated.random("cpu", "float32", dims, rng=rng))
    assert math.prod(dims.values()) > verify.CHEAP_CHECK_WORK
    ref = op_kind(region.op).oracle(region).astype(np.float32)
    budget = budget_for(region.op, "float32")
    assert check_output(region, ref.copy(), budget, np.random.default_rng(0))[0] == ""
    y = _one_wrong_per_tile(ref, at)
    # every tile is wrong, so any tile compared in full catches it: 30 seeds, each caught
    caught = [bool(check_output(region, y, budget, np.random.default_rng(seed))[0]) for seed in range(30)]
    assert all(caught), caught.count(False)


def test_one_wrong_query_row_per_tile_of_every_head_is_caught_on_every_seed():
    rng = np.random.default_rng(5)
    region = Attention.random("cpu", "float32", {"batch": 2, "heads": 4, "q": 1024, "k": 1024, "d": 64}, {}, rng=rng)
    assert math.prod(region.dims.values()) > verify.CHEAP_CHECK_WORK
    assert verify.attention_rows(8, 1024) * 8 >= math.log(verify.MISS_BOUND) / math.log1p(-1 / verify.TILE)
    ref = op_kind("attention").oracle(region).astype(np.float32)
    budget = budget_for("attention", "float32")
    assert check_output(region, ref.copy(), budget, np.random.default_rng(0))[0] == ""
    y = ref.copy()
    y[..., 37::verify.TILE, 3] += 1.0  # the same query row of every 128-row tile, in every head
    caught = [bool(check_output(region, y, budget, np.random.default_rng(seed))[0]) for seed in range(20)]
    assert all(caught), caught.count(False)


def test_a_wrong_element_in_a_head_is_located(monkeypatch):
    """Each head's rows are its own: a reported element names its head and its row."""
    monkeypatch.setattr(verify, "attention_rows", lambda leads, sq: sq)  # every row: the error is surely sampled
    rng = np.random.default_rng(6)
    region = Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 1024, "k": 512, "d": 64},
                              {"causal": "1"}, rng=rng)
    ref = op_kind("attention").oracle(region).astype(np.float32)
    y = ref.copy()
    y[0, 1, 700, 5] -= 1.0
    reason = check_output(region, y, budget_for("attention", "float32"), np.random.default_rng(1))[0]
    assert "(0, 1, 700, 5)" in reason, reason


def test_a_fault_in_half_the_tiles_is_caught_by_the_full_tiles():
    """Half the tiles wrong in one element each, at a place no sampled row, column or diagonal residue of these
    seeds sees: each seed's 10 full tiles find one (1 - 0.5^10 = 0.999 per seed; the seeds are fixed)."""
    rng = np.random.default_rng(4)
    region = Matmul.random("cpu", "float32", {"m": 512, "n": 640, "k": 520}, {"activation": "gelu"}, rng=rng)
    ref = op_kind("matmul").oracle(region).astype(np.float32)
    budget = budget_for("matmul", "float32")
    tiles = [(i, j) for i in range(4) for j in range(5)]
    y = ref.copy()
    for t in np.random.default_rng(9).choice(len(tiles), len(tiles) // 2, replace=False):
        i, j = tiles[int(t)]
        y[i * 128 + 61, j * 128 + 90] += 1.0 + abs(float(y[i * 128 + 61, j * 128 + 90]))
    assert all(check_output(region, y, budget, np.random.default_rng(seed))[0] for seed in range(30))
