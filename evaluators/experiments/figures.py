"""Writing the reproductions' figures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def save_figure(figure: Figure, path: Path, dpi: int = 120) -> None:
    """Lay the figure out, write it to ``path`` and free it."""
    import matplotlib.pyplot as plt  # matplotlib is an optional (evaluators) dependency

    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
