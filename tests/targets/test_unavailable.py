"""A target that cannot run here says so with ``TargetUnavailable`` (an ``ArbiterError``), naming the first
gate it failed on one line; callers never see a bare RuntimeError."""
import numpy as np
import pytest

from arbiter import targets
from arbiter.errors import ArbiterError, TargetUnavailable


@pytest.mark.parametrize("name", ["nvidia", "rocm"])
def test_using_an_unavailable_target_raises_target_unavailable_naming_the_gate(name):
    reason = targets.get(name).available()
    if reason is True:
        pytest.skip(f"{name} is available here")
    with pytest.raises(TargetUnavailable) as caught:
        targets.get(name).from_host(np.zeros(4, np.float32), "float32")
    exc = caught.value
    assert isinstance(exc, ArbiterError) and isinstance(exc, RuntimeError)  # old `except RuntimeError` still holds
    assert (exc.target, exc.reason) == (name, " ".join(reason.split()))
    assert str(exc) == f"target {name} is unavailable: {exc.reason}" and "\n" not in str(exc)


def test_a_reason_over_several_lines_becomes_one():
    exc = TargetUnavailable("nvidia", "an NVRTC-compiled probe kernel failed: CompileException:\n  line 1\n  line 2")
    assert str(exc) == ("target nvidia is unavailable: an NVRTC-compiled probe kernel failed: CompileException: "
                        "line 1 line 2")
