"""The benches' plots: matplotlib without a display (files only), every figure saved the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported when a plot is drawn: it is slow to import)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt: Any, fig: Any, out: Path, *, dpi: int = 120) -> Path:
    """``fig`` laid out and written to ``out`` (its folder made when missing), then closed."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
