"""``matmul``: ``activation(a @ b + bias) + residual``."""
from __future__ import annotations

from arbiter import regions
from arbiter.ops import products
from arbiter.ops.kind import OpKind
from arbiter.ops.matmul.check import product
from arbiter.ops.matmul.probes import FAMILIES
from arbiter.oracles.matmul import oracle, rounding

SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"m": 64, "n": 64, "k": 64}, "float32", {}),
    ({"m": 257, "n": 129, "k": 65}, "float32", {}),
    ({"m": 512, "n": 1, "k": 512}, "float32", {}),
    ({"m": 1, "n": 512, "k": 512}, "float32", {}),
    ({"m": 256, "n": 256, "k": 256}, "float32", {"activation": "gelu", "bias": "1"}),
    ({"m": 200, "n": 300, "k": 100}, "float32", {"activation": "silu", "bias": "1", "residual": "1"}),
    ({"m": 128, "n": 128, "k": 128}, "float64", {}),
    ({"m": 96, "n": 80, "k": 72}, "float16", {"activation": "relu"}),
)

# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "NaN and +Inf bias columns and Inf/NaN residual elements pass through the activation elementwise; a NaN row of "
    "`a` (under an activation) makes its output row NaN. NaN/Inf in `a`/`b` of a plain product are not probed: fast"
    " algorithms (Strassen) spread them to other outputs",
    "-",
    "subnormal `a` with unit `b` (subnormal outputs)",
)

KIND = OpKind("matmul", regions.Matmul, oracle, families=FAMILIES, suite=SUITE, product=product,
              work=products.work, work_text=products.WORK_TEXT,
              torch_reference="arbiter.ops.matmul.torch_ref:ref_matmul", rounding=rounding,
              # 2: large shapes checked on random full tiles / each head's own rows (issue 38 item 6); 3: the
              # nonfinite family's NaN and Inf bias columns drawn apart; 4: the summation order's rounding
              # floor (a correct sgemm where a @ b and bias cancel was refused one gate in 1,500)
              gate_version=4,
              special_values=SPECIAL_VALUES)
