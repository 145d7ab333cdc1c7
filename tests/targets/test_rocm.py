"""The rocm target: its gate with the real hip-python and no ROCm, and its code paths against a fake of
the hip-python boundary (tests/rocm_fake.py) injected at arbiter.targets.rocm's module level."""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np
import pytest

import rocm_fake
from arbiter import targets
from arbiter.regions import Matmul
from arbiter.targets import rocm


def test_gate_with_real_hip_python_and_no_rocm(monkeypatch):
    pytest.importorskip("hip", reason="hip-python is not installed (pip install kernel-arbiter[rocm])")
    for name in ("hip", "hiprtc", "hipblas", "hipblaslt"):
        monkeypatch.setattr(rocm, name, None)  # rebind through the real import
    rocm.TARGET.reset()
    with contextlib.suppress(ImportError):
        import hip.hip as _  # noqa: F401
    from hip import hip as real_hip

    try:
        ok, _count = real_hip.hipGetDeviceCount()
        has_rocm = int(ok) == 0
    except RuntimeError:
        has_rocm = False
    if has_rocm:
        pytest.skip("ROCm is present here: the unavailable path cannot be shown")
    reason = rocm.TARGET.available()
    assert reason is not True
    assert "failed to dlopen" in reason and "libamdhip64.so" in reason
    assert rocm.TARGET.environment() == {"available": reason}
    rocm.TARGET.reset()


def test_gate_without_hip_python(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_hip(name, *args, **kwargs):
        if name == "hip" or name.startswith("hip."):
            raise ImportError("No module named 'hip'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(rocm, "hip", None)
    monkeypatch.setattr(builtins, "__import__", no_hip)
    rocm.TARGET.reset()
    reason = rocm.TARGET.available()
    rocm.TARGET.reset()
    assert "hip-python does not import" in reason and "kernel-arbiter[rocm]" in reason


def test_gate_no_device(monkeypatch):
    rocm_fake.install(monkeypatch, rocm, hip=rocm_fake.FakeHip(devices=0))
    reason = rocm.TARGET.available()
    assert "hipErrorNoDevice" in reason


def test_gate_passes_with_device_and_probe(monkeypatch):
    hip, hiprtc, _ = rocm_fake.install(monkeypatch, rocm)
    assert rocm.TARGET.available() is True
    prog = hiprtc.programs[0]
    assert "--offload-arch=gfx90a:sramecc+:xnack-" in prog["options"]  # full string, features kept
    assert prog["destroyed"]
    name, grid, block, _, _, params, _ = hip.launches[0]
    assert (name, grid, block, params) == ("arbiter_probe", (1, 1, 1), (64, 1, 1), None)


def test_gate_reports_a_failing_probe_compile(monkeypatch):
    rocm_fake.install(monkeypatch, rocm, hiprtc=rocm_fake.FakeHiprtc(log="error: unknown type name 'T'"))
    reason = rocm.TARGET.available()
    assert "probe kernel failed" in reason and "unknown type name 'T'" in reason


def test_environment_key_fields(monkeypatch):
    rocm_fake.install(monkeypatch, rocm)
    env = rocm.TARGET.environment()
    assert env["device"] == "AMD Instinct MI250X"
    assert env["arch"] == "gfx90a" and env["gcn_arch"] == "gfx90a:sramecc+:xnack-"
    assert env["cu_count"] == "110"
    assert env["runtime"] == "6.3.42134"
    assert env["hiprtc"] == "6.3"
    assert env["hipblas"] == "2.3.0"
    assert env["hip_python"] == "fake"
    assert "hipblaslt" in env


@pytest.mark.parametrize("full, base", [("gfx90a:sramecc+:xnack-", "gfx90a"), ("gfx942", "gfx942"),
                                        ("gfx1100:xnack-", "gfx1100")])
def test_base_arch_strips_features(full, base):
    assert rocm.base_arch(full) == base


def test_hip_version_text():
    assert rocm.hip_version_text(60342134) == "6.3.42134"
    assert rocm.hip_version_text(70051831) == "7.0.51831"


def test_check_raises_naming_the_call(monkeypatch):
    rocm_fake.install(monkeypatch, rocm)
    assert rocm.check((0, 5), "hipGetDeviceCount") == 5
    assert rocm.check((0,), "hipFree") is None
    with pytest.raises(rocm.HipError, match=r"hipMalloc failed: hipErrorInvalidValue \(fake error 1\)"):
        rocm.check((rocm_fake.Status.hipErrorInvalidValue, None), "hipMalloc")


def test_arrays_round_trip_and_slice(monkeypatch):
    rocm_fake.install(monkeypatch, rocm)
    t = rocm.TARGET
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    d = t.from_host(host, "float32")
    assert isinstance(d, rocm.RocmArray) and d.flags.c_contiguous and d.shape == (4, 6)
    np.testing.assert_array_equal(t.to_host(d), host)
    view = d[1:, ::2]
    assert not view.flags.c_contiguous and view.offset == 6 * 4
    np.testing.assert_array_equal(t.to_host(view), host[1:, ::2])
    f = t.from_host(host, "float32", order="F")
    assert f.flags.f_contiguous and not f.flags.c_contiguous
    np.testing.assert_array_equal(t.to_host(f), host)
    assert np.isnan(t.to_host(t.full((2, 3), np.nan, "float32"))).all()
    with pytest.raises(IndexError):
        d[0, 0]


def test_region_on_rocm_arrays_keys_by_layout(monkeypatch):
    rocm_fake.install(monkeypatch, rocm)
    t = rocm.TARGET
    a = t.from_host(np.ones((8, 4)), "float32")
    b = t.from_host(np.ones((4, 3)), "float32", order="F")
    region = Matmul(a, b)
    assert region.target == "rocm" and region.key.id.startswith("rocm:matmul:float32:RC")
    assert targets.adopt(a)[0] == "rocm"


def test_kernel_args_marshalling(monkeypatch):
    rocm_fake.install(monkeypatch, rocm)
    a = rocm.TARGET.from_host(np.ones(4), "float32")
    packed = rocm.kernel_args((a, None, np.int32(-3), np.int64(1 << 40), np.float32(0.5)))
    assert [type(p) for p in packed] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                                         ctypes.c_float]
    assert packed[0].value == a.ptr and not packed[1].value
    assert (packed[2].value, packed[3].value, packed[4].value) == (-3, 1 << 40, 0.5)
    with pytest.raises(TypeError, match=r"args\[0\]: int"):
        rocm.kernel_args((3,))


def test_kernel_args_pack_as_hip_python_lays_them_out():
    """hip-python's own packing of the ``extra`` tuple: C alignment of each argument (no GPU needed)."""
    helpers = pytest.importorskip("rocm.bindings._hip_helpers", reason="hip-python 10 is not installed")
    packed = rocm.kernel_args((None, np.int32(7), np.int64(9), np.float32(1.5)))
    extra = helpers.HipModuleLaunchKernel_extra(packed)
    words = (ctypes.c_void_p * 5).from_address(extra.as_c_void_p().value)
    size = ctypes.c_size_t.from_address(words[3]).value
    buf = bytes((ctypes.c_char * size).from_address(words[1]))
    assert size == 28  # pointer 8, int 4 + 4 padding, long long 8, float 4
    assert buf[8:12] == np.int32(7).tobytes() and buf[16:24] == np.int64(9).tobytes()
    assert buf[24:28] == np.float32(1.5).tobytes()


def test_launch_failure_names_the_kernel(monkeypatch):
    hip, _, _ = rocm_fake.install(monkeypatch, rocm)
    kernel = rocm.Kernel(b"code", "softmax_rows")
    hip.fail["hipModuleLaunchKernel"] = 1
    with pytest.raises(rocm.HipError, match=r"hipModuleLaunchKernel\(softmax_rows\) failed"):
        kernel((1,), (32,), (np.int32(1),))


def test_hip_timer_checks_every_call(monkeypatch):
    hip, _, _ = rocm_fake.install(monkeypatch, rocm)
    events = []
    hip.hipEventCreate = lambda: (0, f"event{len(events)}") if not events.append(1) else None
    hip.hipEventRecord = lambda ev, stream: (0,)
    hip.hipEventSynchronize = lambda ev: (0,)
    hip.hipEventElapsedTime = lambda a, b: (0, 2.5)
    hip.hipMemsetD32 = lambda ptr, value, count: (0,)
    from arbiter.targets.rocm import HipTimer

    timer = HipTimer()
    assert timer.cache_bytes == 8 << 20
    timer.flush_cache()
    assert timer.time(lambda: None, "device") == pytest.approx(2.5e-3)
    hip.hipEventElapsedTime = lambda a, b: (rocm_fake.Status.hipErrorInvalidValue, 0.0)
    with pytest.raises(rocm.HipError, match="hipEventElapsedTime"):
        timer.time(lambda: None, "device")


@pytest.mark.rocm
def test_real_gate_on_an_amd_gpu():
    rocm.TARGET.reset()
    ok = rocm.TARGET.available()
    if ok is not True:
        pytest.skip(f"rocm target unavailable: {ok}")
    env = rocm.TARGET.environment()
    assert env["arch"].startswith("gfx") and ":" not in env["arch"]
