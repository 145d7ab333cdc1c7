"""numba's on-disk cache for the arbiter's kernels, kept in the project's private cache folder.

numba finds a ``cache=True`` kernel's cache with its own locators: ``$NUMBA_CACHE_DIR`` first, then
``__pycache__`` beside the source, then ``$XDG_CACHE_HOME/numba``. None of them checks who can write the folder,
and numba unpickles the index (``.nbi``) and code (``.nbc``) it finds there: a folder another user can write lets
that user run code as whoever compiles the kernel next. ``njit(..., cache=True)`` here keeps the cache of every
built-in and synthesized kernel in ``arbiter.cachedir.private_dir("numba")`` instead (its ownership and the
ownership of everything in it checked; an unsafe folder is replaced, with a warning, by one of this process's
own, i.e. no cache across processes), whatever ``NUMBA_CACHE_DIR`` or ``NUMBA_CACHE_LOCATOR_CLASSES`` say.

The folder is resolved on the kernel's first compile, not when its module is imported.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import tempfile

import numba
from numba.core.caching import CompileResultCacheImpl, FunctionCache, _CacheLocator, _SourceFileBackedLocatorMixin

from arbiter.cachedir import private_dir


class _PrivateLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """``<private cache>/numba/<source folder name>_<sha1 of its path>``: numba's layout, in our folder."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(private_dir("numba") / self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path

    def ensure_cache_path(self):
        with contextlib.suppress(FileExistsError):  # inside a checked folder of ours: mode 0700, ours alone
            os.mkdir(self._cache_path, 0o700)
        tempfile.TemporaryFile(dir=self._cache_path).close()  # writable (numba's own test)


class _PrivateImpl(CompileResultCacheImpl):
    """numba's CacheImpl with the private locator always (never the locators numba's settings name)."""

    def __init__(self, py_func):
        self._lineno = py_func.__code__.co_firstlineno
        qualname = getattr(py_func, "__qualname__", py_func.__name__)
        source = inspect.getfile(py_func)
        locator = _PrivateLocator.from_function(py_func, source)
        if locator is None:  # FunctionCache's callers expect a locator: numba raises this too
            raise RuntimeError(f"cannot cache {qualname}: no private cache folder for {source}")
        self._locator = locator
        fullname = f"{os.path.splitext(os.path.basename(source))[0]}.{qualname}"
        self._filename_base = self.get_filename_base(fullname, getattr(sys, "abiflags", ""))


class _PrivateCache(FunctionCache):
    _impl_class = _PrivateImpl


class _LazyCache:
    """The dispatcher's ``_cache``: builds the private cache on first use (a compile), so importing a module of
    kernels touches no folder. Where no private folder can be had, the kernel compiles without a disk cache."""

    def __init__(self, py_func):
        self._py_func = py_func
        self._real = None
        self._enabled = True

    def _cache(self):
        if self._real is None:
            try:
                self._real = _PrivateCache(self._py_func)
            except (RuntimeError, OSError):
                from numba.core.caching import NullCache

                self._real = NullCache()
            if not self._enabled:
                self._real.disable()
        return self._real

    @property
    def cache_path(self):
        return self._cache().cache_path

    def load_overload(self, sig, target_context):
        return self._cache().load_overload(sig, target_context)

    def save_overload(self, sig, data):
        self._cache().save_overload(sig, data)

    def enable(self):
        self._enabled = True
        if self._real is not None:
            self._real.enable()

    def disable(self):
        self._enabled = False
        if self._real is not None:
            self._real.disable()

    def flush(self):
        self._cache().flush()


def njit(*args, **options):
    """``numba.njit`` whose ``cache=True`` caches in the private folder (see the module docstring)."""
    cache = options.pop("cache", False)

    def decorate(fn):
        dispatcher = numba.njit(**options)(fn)
        if cache:
            dispatcher._cache = _LazyCache(dispatcher.py_func)
        return dispatcher

    if len(args) == 1 and callable(args[0]):
        return decorate(args[0])
    if args:
        raise TypeError("njit: give options by name (a signature list is not supported here)")
    return decorate
