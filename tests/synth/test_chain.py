"""The target-neutral chain description and expression rendering."""
from __future__ import annotations

import pytest

from arbiter.regions import Matmul
from arbiter.synth import ACTIVATIONS, Chain, Operand, Step, content_hash, epilogue_chain, render_expression


def test_epilogue_chain_orders_bias_activation_residual(rng):
    region = Matmul.random("cpu", "float32", {"m": 2, "n": 3, "k": 4},
                           attrs={"bias": 1, "activation": "gelu_tanh", "residual": 1}, rng=rng)
    chain = epilogue_chain(region)
    assert chain.steps == (Step("add", "bias"), Step("act", "gelu_tanh"), Step("add", "residual"))
    assert chain.text() == "v + bias[row] -> gelu_tanh -> v + residual[full]"
    assert epilogue_chain(Matmul.random("cpu", "float32", {"m": 2, "n": 3, "k": 4}, rng=rng)).text() == "identity"


@pytest.mark.parametrize("operands,steps,message", [
    ((Operand("b", "row"),), (Step("add", "c"),), "not an operand"),
    ((), (Step("act", "swish"),), "activation 'swish'"),
    ((Operand("b", "row"),), (Step("div", "b"),), "op 'div'"),
    ((Operand("b", "row"), Operand("b", "col")), (), "duplicate"),
])
def test_bad_chains_are_refused_with_the_step_named(operands, steps, message):
    with pytest.raises(ValueError, match=message):
        Chain(operands, steps)


def test_bad_operands_are_refused():
    with pytest.raises(ValueError, match="kind"):
        Operand("b", "diagonal")
    with pytest.raises(ValueError, match="name"):
        Operand("out", "row")


def test_render_expression_respells_literals_and_functions():
    text = render_expression(ACTIVATIONS["gelu"], literal=lambda t: f"{t}f",
                             functions={"erf": "erff", "tanh": "tanhf", "exp": "expf", "max": "fmaxf"})
    assert text == "0.5f * v * (1.0f + erff(v * 0.7071067811865476f))"
    with pytest.raises(ValueError, match="no spelling for"):
        render_expression("v", literal=str, functions={"erf": "erf"})


def test_content_hash_is_stable_and_sensitive():
    assert content_hash("a") == content_hash("a") != content_hash("b")
    assert len(content_hash("a")) == 16
