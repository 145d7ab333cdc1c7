"""The synthesized tier's generator, target-neutral part: a region's description as an elementwise chain.

A ``Chain`` says what one fused pass computes for every element ``v`` of a 2-D ``[M, N]`` value
(for a matmul, the product ``a @ b``): a sequence of ``Step``s, each one of

* ``add`` / ``sub`` / ``mul`` with an ``Operand``, broadcast by its kind: ``row`` (``[N]``, one
  value per column: a bias), ``col`` (``[M]``, one value per row), ``full`` (``[M, N]``: a residual),
  ``scalar`` (one number);
* ``act`` with an activation, written below in a neutral expression syntax (``v``, numeric
  literals, ``erf``, ``tanh``, ``exp``, ``max``).

A backend (``arbiter.synth.cpu``, ``arbiter.synth.cuda``) renders a chain into kernel source with
``render_expression`` (its own spelling of literals and functions); the source's content hash
names its cache entry and so identifies the kernel.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

OPERAND_KINDS = ("row", "col", "full", "scalar")
BINARY_STEPS = ("add", "sub", "mul")

# Activations in the neutral syntax. gelu is the exact erf form (PyTorch's default).
ACTIVATIONS: dict[str, str] = {
    "none": "v",
    "relu": "max(v, 0.0)",
    "gelu": "0.5 * v * (1.0 + erf(v * 0.7071067811865476))",
    "gelu_tanh": "0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))",
    "silu": "v / (1.0 + exp(-v))",
}
FUNCTIONS = ("erf", "tanh", "exp", "max")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LITERAL = re.compile(r"(?<![A-Za-z0-9_.])(\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|\d+)(?![A-Za-z0-9_.])")
_CALL = re.compile(r"\b(" + "|".join(FUNCTIONS) + r")\(")


@dataclass(frozen=True)
class Operand:
    name: str
    kind: str  # one of OPERAND_KINDS

    def __post_init__(self):
        if not _NAME.match(self.name) or self.name in ("v", "i", "j", "z", "out", "kernel"):
            raise ValueError(f"name: {self.name!r} is not a usable operand name (an identifier, not v/i/j/z/out)")
        if self.kind not in OPERAND_KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {', '.join(OPERAND_KINDS)}")


@dataclass(frozen=True)
class Step:
    op: str  # "add" | "sub" | "mul" (arg = an operand name) or "act" (arg = an activation name)
    arg: str


@dataclass(frozen=True)
class Chain:
    """An elementwise chain over ``v``; validated at construction (names the bad step)."""

    operands: tuple[Operand, ...]
    steps: tuple[Step, ...]

    def __post_init__(self):
        names = [o.name for o in self.operands]
        if len(set(names)) != len(names):
            raise ValueError(f"operands: duplicate names in {names}")
        for n, step in enumerate(self.steps):
            if step.op == "act":
                if step.arg not in ACTIVATIONS:
                    raise ValueError(f"steps[{n}]: activation {step.arg!r} is not one of {', '.join(ACTIVATIONS)}")
            elif step.op in BINARY_STEPS:
                if step.arg not in names:
                    raise ValueError(f"steps[{n}]: {step.op} uses {step.arg!r}, which is not an operand ({names})")
            else:
                raise ValueError(f"steps[{n}]: op {step.op!r} is not one of act, {', '.join(BINARY_STEPS)}")

    def operand(self, name: str) -> Operand:
        return next(o for o in self.operands if o.name == name)

    def text(self) -> str:
        """One line for humans: ``v + bias[row] -> gelu -> v + residual[full]``."""
        sign = {"add": "+", "sub": "-", "mul": "*"}
        parts = [s.arg if s.op == "act" else f"v {sign[s.op]} {s.arg}[{self.operand(s.arg).kind}]"
                 for s in self.steps]
        return " -> ".join(parts) or "identity"


def epilogue_chain(region) -> Chain:
    """The matmul epilogue of ``region`` as a chain: bias (row) -> activation -> residual (full)."""
    operands, steps = [], []
    if region.bias is not None:
        operands.append(Operand("bias", "row"))
        steps.append(Step("add", "bias"))
    if region.activation != "none":
        steps.append(Step("act", region.activation))
    if region.residual is not None:
        operands.append(Operand("residual", "full"))
        steps.append(Step("add", "residual"))
    return Chain(tuple(operands), tuple(steps))


def render_expression(expr: str, *, literal, functions: dict[str, str]) -> str:
    """``expr`` in a backend's spelling: each numeric literal through ``literal(text)``,
    each function name through ``functions`` (which must name all of FUNCTIONS)."""
    missing = set(FUNCTIONS) - set(functions)
    if missing:
        raise ValueError(f"functions: no spelling for {', '.join(sorted(missing))}")
    out = _LITERAL.sub(lambda m: literal(m.group(1)), expr)
    return _CALL.sub(lambda m: functions[m.group(1)] + "(", out)


def content_hash(text: str) -> str:
    """The identity of a generated source: 16 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
