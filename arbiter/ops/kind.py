"""``OpKind``: everything the core needs to know about one op, as hooks, and the registry of op kinds by name.

The core (``verify``, ``probes``, ``torch``, ``report``, ``suite``) asks an op's kind, never its name: the gate
takes the oracle, the budgets, the probe families and the large-shape check from it; ``arbiter.torch`` its
torch reference; the report its work model; the quick suite its shapes. A hook left at its default means
"this op has none": the gate then compares the full float64 oracle at every shape, the report plots time only.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from arbiter.errors import unknown
from arbiter.oracles import budgets
from arbiter.oracles.budgets import Budget

if TYPE_CHECKING:
    from arbiter.regions import Region


@dataclass(frozen=True)
class Product:
    """A product op's structure, for the gate's large-shape check (``verify``): the output is
    ``finish([left @ w for w in rights], row_sel, col_sel)`` in float64, where ``finish`` applies the epilogue to
    the selected rows and columns. ``linear``: ``finish`` adds ``bias`` (broadcast over rows) and ``residual`` to
    the single product and nothing else, so a Freivalds check sees every element."""

    left: Any
    rights: tuple
    finish: Callable  # (float64 products, row selection, column selection) -> float64 reference
    linear: bool = False
    bias: Any = None
    residual: Any = None


@dataclass(frozen=True)
class TorchOp:
    """How ``arbiter.torch`` offers an op kind as ``torch.ops.arbiter.<op>`` (and ``arbiter.torch.OPS[op]``): a
    ``torch.library`` custom op whose implementation arbitrates the kind's region, built from the op's arguments
    with its tensors handed over as the arbiter's arrays; its fake kernel an empty tensor of ``output_shape``; its
    backward the VJP of the kind's ``torch_reference`` when it has one (else it has no gradient)."""

    schema: str  # the arguments and result in torch.library's schema language: "(Tensor x, float eps) -> Tensor"
    region: Callable  # (*the op's arguments, each tensor replaced by its array) -> the kind's Region
    output_shape: Callable  # (*the op's arguments, tensors real or fake) -> the output's shape


@dataclass(frozen=True)
class OpKind:
    """One op kind. ``name``, ``region_type`` and ``oracle`` are required; every other hook is optional."""

    name: str
    region_type: type[Region]
    oracle: Callable  # region -> float64 array (the F4 gate's reference)
    # dtype -> Budget where this op's arithmetic needs other room than the dtype's default (docs/budgets.md).
    budgets: Mapping[str, Budget] = field(default_factory=dict)
    # The adversarial probe families (``arbiter.probes.Family``), in the order the gate draws them.
    families: tuple = ()
    # The quick suite's problems of this op: (dims, dtype, attrs) each.
    suite: tuple[tuple[dict, str, dict], ...] = ()
    # Large shapes: region -> Product (the gate samples rows and columns of the product, and Freivalds-checks a
    # linear one), or (region, query rows) -> the oracle's reference of those rows along the output's axis -2.
    product: Callable[[Any], Product] | None = None
    rows_oracle: Callable | None = None
    # (region, the op's budget) -> the budget a real call with these operands is held to by the audit: the
    # budget of the value family its data belongs to (a family with a looser budget of its own matches only data
    # like its own). None: the op's budget (every family of the op has it).
    call_budget: Callable | None = None
    # Row ops whose output is too large for one float64 reference: (region, i0, i1) -> (the region restricted to
    # output rows i0:i1, the output index of those rows) or None; the number of such rows; and, for rows too long
    # to hold in float64 at once, (region, step) -> the reference a piece at a time (``oracles.long_rows``).
    sub_rows: Callable | None = None
    row_count: Callable | None = None
    row_pieces: Callable | None = None
    # (dims, dtype) -> (work of one call, "FLOP" | "B") or None; and what the report says it counts.
    work: Callable[[dict, str], tuple[float, str] | None] | None = None
    work_text: str = ""
    # "module:function" of the op's torch reference (``arbiter.torch.REFERENCE``), imported only by arbiter.torch.
    torch_reference: str | None = None
    # A row whose oracle output holds a NaN (its input held a NaN or an Inf) may come back NaN in every element:
    # the row is non-finite either way, and vendors' fused norms (torch's CUDA rms_norm) fill it (budgets.md).
    nan_fills_row: bool = False
    # region -> float64 array shaped like the output: the rounding error a correct kernel may make at each element
    # by its summation order, subtracted from each difference where the full reference is compared (like the
    # output format's own floor, ``verify.ROUNDING_FLOOR``). None: the output's rounding alone.
    rounding: Callable | None = None
    # An output holding several results of their own scale (add_rmsnorm's [2, ...]: the sum and the normalised
    # rows): the index of each along the output's first axis, each compared with its part of the reference alone
    # (one Frobenius norm over both would let the smaller result's error hide under the larger's). (): one result.
    parts: tuple = ()
    # ``torch.ops.arbiter.<op>`` for a kind of one's own (``TorchOp``); the built-ins' torch ops are written out in
    # ``arbiter.torch`` (their reshapes and closed-form backward passes).
    torch_op: TorchOp | None = None
    # This op's own gate rules version (``arbiter.gate``): bump it when what the gate decides for this op alone
    # changes (its oracle, budgets, families, large-shape check); only this op's verdicts are then taken again.
    gate_version: int = 1
    # The op's special-value semantics as docs/budgets.md's "Special values" table states them (its three cells:
    # NaN / Inf inputs, masked (-inf) entries, other values), in Markdown; () leaves the op out of the table.
    special_values: tuple[str, str, str] | tuple[()] = ()

    def rows_of(self, region) -> int:
        """The number of output rows ``sub_rows`` splits ``region`` into."""
        if self.row_count is not None:
            return self.row_count(region)
        shape = region.output_shape()
        return shape[0] if shape else 0


OPS: dict[str, OpKind] = {}


def register_op_kind(kind: OpKind) -> OpKind:
    """Register (or replace) ``kind`` under ``kind.name``; its budgets join the published table's overrides.
    Raises ValueError when ``kind.region_type.op`` is not ``kind.name``."""
    if not isinstance(kind, OpKind):
        raise TypeError(f"kind: expected an OpKind, got {type(kind).__name__}")
    if getattr(kind.region_type, "op", None) != kind.name:
        raise ValueError(f"region_type: {kind.region_type.__name__}.op is {getattr(kind.region_type, 'op', None)!r}, "
                         f"expected {kind.name!r}")
    old = OPS.get(kind.name)
    if old is not None:
        for dtype in old.budgets:
            budgets.OP_BUDGETS.pop((kind.name, dtype), None)
    for dtype, budget in kind.budgets.items():
        budgets.OP_BUDGETS[(kind.name, dtype)] = budget
    OPS[kind.name] = kind
    for hook in _ON_REGISTER:
        hook(kind)
    return kind


# Called with each op kind registered from now on (``on_register``): arbiter.torch's, which sits above this layer,
# offers a kind's ``TorchOp`` as a torch custom op whether the kind came before or after ``import arbiter.torch``.
_ON_REGISTER: list[Callable[[OpKind], None]] = []


def on_register(hook: Callable[[OpKind], None]) -> None:
    """Call ``hook(kind)`` for every op kind registered now and later."""
    _ON_REGISTER.append(hook)
    for kind in list(OPS.values()):
        hook(kind)


def register_op(name: str, region_type: type[Region], oracle: Callable, **hooks) -> OpKind:
    """Register (or replace) an op kind from its parts. ``region_type.op`` must equal ``name``. Replacing a kind
    keeps the hooks not given (a plug-in oracle for a built-in op keeps its probe families)."""
    old = OPS.get(name)
    if old is not None:
        return register_op_kind(replace(old, region_type=region_type, oracle=oracle, **hooks))
    return register_op_kind(OpKind(name, region_type, oracle, **hooks))


def unregister_op(name: str) -> None:
    """Forget the op kind ``name`` (and its budget overrides); no error when it is not registered."""
    kind = OPS.pop(name, None)
    for dtype in kind.budgets if kind is not None else ():
        budgets.OP_BUDGETS.pop((name, dtype), None)


def op_kind(name: str) -> OpKind:
    kind = OPS.get(name)
    if kind is None:
        raise ValueError(f"op: {unknown('op', name, OPS)}")
    return kind
