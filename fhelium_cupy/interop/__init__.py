"""Bridges to NumPy, CuPy and torch: array leaves, devices, streams and events."""

from __future__ import annotations

from .devices import Device, as_device

__all__ = ["Device", "as_device"]
