"""Charts as PNG for Prefect image artifacts (the capacity plan's, the rollout's)."""

from __future__ import annotations

import base64
import io
from typing import Any


def figure_png(figure: Any) -> bytes:
    """A matplotlib figure, dates slanted and laid out tight, as PNG bytes."""
    figure.autofmt_xdate()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def png_data_uri(png: bytes) -> str:
    """What an image artifact's `image_url` takes for a picture stored nowhere else."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
