"""matplotlib figures as PNG bytes, drawn on the Agg canvas (no display, no pyplot state): the experiments' figures."""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 90


def png(figure: Figure, *, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes, drawn on matplotlib's Agg canvas (no display, no pyplot state)."""
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
