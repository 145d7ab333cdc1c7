"""Register a hand-written candidate, tune a key, dispatch, read the counters.

    python examples/custom_candidate.py        (uses ./registry.db unless ARBITER_DB says otherwise)
"""
import numpy as np

import arbiter
from arbiter.regions import Softmax
from arbiter.tune import tune_region


# 1. A hand-written softmax: one exp pass, reusing the output buffer. Tier EMITTED, so by tier the
#    vendor (NumPy) would win; only a measurement can promote it.
@arbiter.candidate(op="softmax", target="cpu", tier=arbiter.Tier.EMITTED, name="my_softmax",
                   applies_to=lambda r: r.axis_last or "last axis only")
def my_softmax(region):
    out = region.alloc_out()
    x = region.x
    np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    np.exp(out, out=out)
    out *= 1.0 / out.sum(axis=-1, keepdims=True)
    return out


x = np.random.default_rng(0).standard_normal((512, 2048)).astype(np.float32)
region = Softmax(x)

# 2. Tune the key: every candidate is gated against the float64 oracle, then timed.
decision = tune_region(region, arbiter.dispatch.store())
print(decision)

# 3. Dispatch: the first call installs the stored solution, later calls are warm hits.
for _ in range(100):
    y = arbiter.run_arbitrated("softmax", region)
assert np.allclose(y.sum(axis=-1), 1.0, atol=1e-5)

# 4. Counters per (key, solution).
for row in arbiter.stats():
    print(row["solution"], row["policy"], "hits", row["hits"], "loads", row["loads"], "misses", row["misses"])
arbiter.flush()
