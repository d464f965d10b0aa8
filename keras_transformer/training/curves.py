"""A run's training curves as a PNG, redrawn by the run's callbacks after every epoch.

The Agg backend is used, so no display is needed, unless MPLBACKEND names another
(Jupyter's inline one); `plotting.py`, the other figures, draws with the same choice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib

# Agg needs no display. A backend chosen through MPLBACKEND is kept: Jupyter
# kernels set the inline one there, and Agg would hide every figure in a notebook.
if not os.environ.get("MPLBACKEND"):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_training_curves", "plt"]


def _history_entries(history_or_run_dir) -> list[dict]:
    """One dict per epoch, from a History, a history dict, entries, or a run directory."""
    if isinstance(history_or_run_dir, (str, os.PathLike)):
        path = Path(history_or_run_dir)
        if path.is_dir():
            path = path / "history.json"
        return json.loads(path.read_text(encoding="utf-8"))
    if isinstance(history_or_run_dir, list):
        return history_or_run_dir
    history = getattr(history_or_run_dir, "history", history_or_run_dir)
    epochs = len(next(iter(history.values()), []))
    return [{"epoch": i + 1, **{k: v[i] for k, v in history.items()}} for i in range(epochs)]


def plot_training_curves(history_or_run_dir, path: str | os.PathLike) -> Path:
    """Loss and masked accuracy per epoch, training and validation, saved as a PNG.

    Args:
        history_or_run_dir: a `keras.callbacks.History`, its `.history` dict, a
            run directory (its history.json) or a list of per-epoch dicts.
        path: where the PNG goes.
    """
    entries = _history_entries(history_or_run_dir)
    if not entries:
        raise ValueError("No epochs to plot: the history is empty.")
    epochs = [e.get("epoch", i + 1) for i, e in enumerate(entries)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, metric, title in zip(
        axes, ("loss", "masked_accuracy"), ("Loss", "Masked accuracy"), strict=True
    ):
        for prefix, label in (("", "training"), ("val_", "validation")):
            values = [e.get(prefix + metric) for e in entries]
            if any(v is not None for v in values):
                ax.plot(epochs, values, marker="o", label=label)
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
