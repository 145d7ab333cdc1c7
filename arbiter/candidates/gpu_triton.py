"""What the Triton-emitted candidates of every GPU target share: availability, the private kernel cache, compile
once per specialization, and a thin launch.

Triton is the optional extra ``kernel-arbiter[triton]``; nothing here imports it at module load, so the candidates
register, and list "needs Triton ... install kernel-arbiter[triton]", where it is absent. Triton picks its GPU
driver through PyTorch (CUDA or ROCm build), so a target's Triton candidates are available where Triton's active
backend is that target's (``cuda`` on nvidia, ``hip`` on rocm).

**Cache.** Triton writes compiled kernels and the C launcher modules it builds and *imports* into its cache
folder, so that folder is held to the rule of every imported cache: ``arbiter.cachedir.private_dir("triton",
<backend>)`` (owned by this user, not writable by others; a private fallback otherwise), set as Triton's
cache folder before the first compile. A folder named by ``TRITON_CACHE_DIR`` is not used.

**Compile.** ``triton.compile`` on an ``ASTSource`` per specialization: the kernel's constexprs (tile, flags),
the pointer types of the dtype, strides equal to 1 made constexpr, 16-divisibility of pointers (all of a call's
pointers 16-byte aligned, or none assumed) and of the integer arguments that are, and 32- or 64-bit integers by
the operands' extents. What a plan was specialized on is part of its key, so a call is never launched on a kernel
that assumed what its operands do not hold.

**Launch.** ``kernel[grid](...)`` binds and specializes every argument on every call (27.6 us on an H200 against
15.4 us for ``torch.mm``). A warm call here looks its ``LaunchPlan`` up by one tuple of its shape, strides and
alignment, and calls the compiled kernel's C launcher once with the plan's grid, function handle, metadata and
integer arguments, its pointers as plain integers (no ``data_ptr`` or pointer-attribute query), on CuPy's
current stream (the caller's torch stream for a torch caller: ``candidates.run_for_torch`` makes it current).
A kernel that needs Triton's scratch memory, or a launcher of another shape (ROCm's), goes through
``CompiledKernel[grid]`` instead: correct, a few microseconds slower.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import threading
from collections.abc import Sequence

from arbiter.candidates import Candidate, Tier
from arbiter.memo import Memo

INSTALL_HINT = "install kernel-arbiter[triton]"
POINTER_TYPES = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32"}
INT32_LIMIT = 2**31 - 1
# The ``ACTIVATION`` constexpr of ``_triton_kernels.gemm`` (its ``_activate``) per Matmul activation.
ACTIVATION_CODES = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
_lock = threading.Lock()  # compiles and first launches
_cache_set: Memo = Memo()  # backend -> the cache folder Triton was pointed at


@functools.cache
def triton_version() -> str:
    try:
        from importlib import metadata

        return metadata.version("triton")
    except Exception:
        return "absent"


def triton_reason(backend: str) -> bool | str:
    """True when Triton imports and its active driver is ``backend`` (``cuda``, ``hip``); else why not, with the
    install hint. Not cached when it fails for want of a device (the target says that first)."""
    return _triton_reason(backend)


@functools.cache
def _triton_reason(backend: str) -> bool | str:
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        return f"needs Triton ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
    try:
        from triton.runtime import driver

        found = driver.active.get_current_target().backend
    except Exception as exc:  # no torch, no device, more than one driver: Triton's own words
        return f"Triton has no active GPU driver here ({type(exc).__name__}: {exc})"
    if found != backend:
        return f"Triton's active backend is {found}, not {backend}"
    return True


def use_private_cache(backend: str) -> str:
    """Point Triton's cache at this project's private folder for ``backend`` (once a process); its path."""
    from arbiter.cachedir import private_dir

    path = _cache_set.get(backend)
    if path is None:
        import triton

        path = str(private_dir("triton", backend))
        triton.knobs.cache.dir = path
        _cache_set[backend] = path
    return path


def kernels():
    """The kernel module (``_triton_kernels``), imported on first use: it needs Triton."""
    return importlib.import_module("arbiter.candidates._triton_kernels")


def divisible(value: int) -> bool:
    return value % 16 == 0


def int_type(wide: bool) -> str:
    return "i64" if wide else "i32"


def extent(array) -> int:
    """The largest element offset an index into ``array`` can reach, with a block's overshoot (Triton computes
    offsets in 32-bit integers unless told otherwise)."""
    item = array.itemsize
    return sum((d + 256) * abs(s // item) for d, s in zip(array.shape, array.strides))


def needs_64bit(*arrays) -> bool:
    return any(a is not None and extent(a) > INT32_LIMIT for a in arrays)


class Spec:
    """One specialization's signature for ``triton.compile``: arguments in the kernel's order, each a pointer
    (its type), an integer (its value: constexpr when 1, 16-divisible noted) or a constexpr."""

    __slots__ = ("names", "signature", "constexprs", "divisible", "values")

    def __init__(self, fn):
        self.names = list(inspect.signature(fn.fn).parameters)
        self.signature: dict[str, str] = {}
        self.constexprs: dict[str, object] = {}
        self.divisible: list[int] = []
        self.values: list = []  # what the launcher takes after the pointers (and runtime scalars): ints, constexprs

    def pointer(self, name: str, ptype: str, aligned: bool) -> None:
        self._add(name, ptype)
        if aligned:
            self.divisible.append(self.names.index(name))

    def runtime(self, name: str, ty: str) -> None:
        """An argument passed on every call beside the pointers (a runtime scalar such as ``eps``: not keyed, so
        never bound into a plan); it must come right after the pointers."""
        self._add(name, ty)

    def integer(self, name: str, value: int, wide: bool, unit_constexpr: bool = True) -> None:
        if unit_constexpr and value == 1:
            self.constant(name, 1)
            return
        self._add(name, int_type(wide))
        if divisible(value):
            self.divisible.append(self.names.index(name))
        self.values.append(value)

    def constant(self, name: str, value) -> None:
        self._add(name, "constexpr")
        self.constexprs[name] = value
        self.values.append(value)

    def _add(self, name: str, ty: str) -> None:
        expected = self.names[len(self.signature)]
        if name != expected:
            raise ValueError(f"name: argument {name!r} given where the kernel's next one is {expected!r}")
        self.signature[name] = ty

    def key(self) -> tuple:
        return (tuple(self.signature.items()), tuple(sorted((k, repr(v)) for k, v in self.constexprs.items())),
                tuple(self.divisible))


_compiled: Memo = Memo()  # (kernel name, backend, device, spec key, warps, stages) -> CompiledKernel


def compile_spec(name: str, backend: str, device: int, spec: Spec, warps: int, stages: int):
    """The compiled kernel ``name`` for ``spec`` (once a process per specialization; Triton's disk cache, in the
    private folder, across processes)."""
    key = (name, backend, device, spec.key(), warps, stages)
    found = _compiled.get(key)
    if found is None:
        with _lock:
            found = _compiled.get(key)
            if found is None:
                use_private_cache(backend)
                import triton
                from triton.compiler import ASTSource

                fn = kernels().KERNELS[name]
                attrs = {(i,): [["tt.divisibility", 16]] for i in spec.divisible}
                src = ASTSource(fn, dict(spec.signature), dict(spec.constexprs), attrs)
                found = triton.compile(src, options={"num_warps": warps, "num_stages": stages})
                found.run  # noqa: B018  # loads the module on this device and builds the launcher (Triton's lazy init)
                _compiled[key] = found
    return found


class LaunchPlan:
    """What a warm call of one shape needs: ``call(stream, *pointers)``, one call of the compiled kernel's C
    launcher with everything but the stream and the pointers bound (grid, function handle, metadata, the integer
    and constexpr arguments)."""

    __slots__ = ("call", "thin", "compiled", "grid", "values")

    def __init__(self, compiled, grid: tuple[int, int, int], values: list):
        self.compiled, self.grid, self.values = compiled, grid, tuple(values)
        launcher = compiled.run
        self.thin = (type(launcher).__name__ == "CudaLauncher" and hasattr(launcher, "launch")
                     and not getattr(launcher, "global_scratch_size", 0)
                     and not getattr(launcher, "profile_scratch_size", 0))
        self.call = _thin_call(compiled, launcher, grid, self.values) if self.thin else _generic_call(compiled, grid,
                                                                                                      self.values)

    def __call__(self, stream: int, *pointers) -> None:
        self.call(stream, *pointers)


def _thin_call(compiled, launcher, grid, values):
    """CudaLauncher.launch(gridX, gridY, gridZ, stream, function, cooperative, pdl, global_scratch, profile_scratch,
    kernel_metadata, launch_metadata, enter_hook, exit_hook, *kernel arguments), all but the stream and the
    pointers bound here (the hooks off: Triton's profiler hooks are not called on this path)."""
    launch, (g0, g1, g2), function = launcher.launch, grid, compiled.function
    coop, pdl, metadata = int(launcher.launch_cooperative_grid), int(launcher.launch_pdl), compiled.packed_metadata

    def call(stream, *pointers):
        launch(g0, g1, g2, stream, function, coop, pdl, None, None, metadata, None, None, None, *pointers, *values)

    return call


def _generic_call(compiled, grid, values):
    """Through ``CompiledKernel[grid]``: any launcher (ROCm's), scratch memory allocated by Triton."""
    def call(stream, *pointers):
        compiled[grid](*pointers, *values, stream=stream)

    return call


class TritonCandidate(Candidate):
    """Base of the Triton-emitted candidates: EMITTED tier, available where Triton's driver is the target's,
    the kernel module and Triton's version in the code identity. Subclasses set ``target`` and ``triton_backend``
    and implement ``run`` through ``plan`` (their launch plans live in ``plans``)."""

    tier = Tier.EMITTED
    triton_backend = "cuda"
    dtypes: tuple[str, ...] = ("float16", "bfloat16")
    plans: Memo
    # The launch configurations tuning chooses among ({"tile": [BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps,
    # stages]}), and the candidate that serves float32 instead (named in the reason float32 is declined).
    tiles: Sequence[tuple[int, ...]] = ()
    float32_by = ""

    def param_space(self):
        return [{"tile": list(t)} for t in self.tiles]

    def applies_to(self, region):
        ok = self.check_dtype(region)
        if ok is not True and region.dtype == "float32" and self.float32_by:
            # check_dtype gives True or a reason, never False
            return f"{ok} (tensor cores would mean TF32, over the float32 budget; {self.float32_by} serves float32)"
        return ok

    def available(self):
        ok = self.target_reason()
        return triton_reason(self.triton_backend) if ok is True else ok

    def target_reason(self) -> bool | str:
        """Whether the target's arrays are here: CuPy on nvidia (its NVRTC backend's answer, "needs CuPy" without
        it: a torch-only nvidia target has no array these kernels take), the target itself on rocm."""
        from arbiter.targets import nvrtc

        return nvrtc.BACKEND.available()

    def check_dtype(self, region) -> bool | str:
        if region.dtype not in self.dtypes:
            return f"dtype {region.dtype} is not one of {', '.join(self.dtypes)}"
        return True

    def source(self):
        import pathlib

        text = (pathlib.Path(__file__).parent / "_triton_kernels.py").read_text()
        named = [inspect.getsource(c) for c in type(self).__mro__[1:] if "name" in vars(c) and c is not Candidate]
        return Candidate.source(self) + "".join(named) + text + f"\ntriton=={triton_version()}"

    def stream(self) -> int:
        """The stream a launch goes to: CuPy's current one on nvidia (a torch caller's, made current)."""
        from arbiter.targets.nvidia import cupy_module

        return cupy_module().cuda.get_current_stream().ptr

    def device(self) -> int:
        from arbiter.targets.nvidia import cupy_module

        return cupy_module().cuda.runtime.getDevice()

