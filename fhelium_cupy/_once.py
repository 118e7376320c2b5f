"""Build-once caches shared by threads: hits take no lock, a miss builds under one.

Keys, key chains and compiled kernel modules are made lazily and read on every call, by
workers on several threads. Imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, MutableMapping
from typing import Any, TypeVar

__all__ = ["get_or_build"]

_V = TypeVar("_V")


def get_or_build(cache: MutableMapping[Any, Any], key: Any, lock: threading.Lock | threading.RLock,
                 build: Callable[..., _V], *args: Any) -> _V:
    """``cache[key]``, built by ``build(*args)`` and stored on a miss (``None`` counts as missing).

    A hit is one dict lookup (pass a bound method and its arguments rather than a closure
    made per call). A miss takes ``lock`` and looks again, so racing threads get the one
    value the first of them built and no value is ever replaced. ``build`` may itself call
    ``get_or_build`` with the same lock when that lock is an ``RLock``.
    """
    value = cache.get(key)
    if value is None:
        with lock:
            value = cache.get(key)
            if value is None:
                value = cache[key] = build(*args)
    return value  # type: ignore[no-any-return]
