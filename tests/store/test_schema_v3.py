"""Schema v3: delegate contracts persist with their candidate; measurements keep the exact dims timed."""
import dataclasses

import numpy as np

from arbiter import Candidate, Contract, Tier
from arbiter.regions import RMSNorm
from arbiter.store.sql import SqlStore
from arbiter.tune import tune_region


class Delegate(Candidate):
    name, target, op, tier = "my_delegate", "cpu", "rmsnorm", Tier.HAND_TUNED
    contract = Contract(provenance="vendor_library", accuracy="bounded", rel_fro=1e-4, atol=1e-3, rtol=1e-3,
                        deterministic=False)

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        np.multiply(x / np.sqrt((x * x).mean(-1, keepdims=True) + region.eps), region.weight, out=out)
        return out


def test_contract_and_measured_dims_survive_reopening(tmp_path, only_candidates):
    from arbiter.candidates.cpu.numpy_rmsnorm import NumpyRMSNorm

    only_candidates("cpu", "rmsnorm", NumpyRMSNorm(), Delegate())
    db = tmp_path / "registry.db"
    store = SqlStore(str(db))
    region = RMSNorm.random("cpu", "float32", {"rows": 37, "cols": 300}).allow_looser()  # consent to its contract
    decision = tune_region(region, store, budget_s=0.2)
    store.close()

    again = SqlStore(str(db))
    stored = again.contracts()
    assert stored == {Delegate().identity(): dataclasses.asdict(Delegate.contract)}
    assert Contract(**stored[Delegate().identity()]) == Delegate.contract
    dims = {m.candidate_name: m.dims for m in again.load_measurements(region.key.id, decision.env.fingerprint)}
    assert dims == {"numpy_rmsnorm": {"rows": 37, "cols": 300}, "my_delegate": {"rows": 37, "cols": 300}}
    again.close()
