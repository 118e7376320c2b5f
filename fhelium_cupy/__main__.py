"""``python -m fhelium_cupy`` runs the ``fhelium-cupy`` command line."""

from __future__ import annotations

from ._cli import main

raise SystemExit(main())
