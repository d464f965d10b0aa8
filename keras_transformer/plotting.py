"""Figures with matplotlib: positional encoding, learning rate, attention, training curves.

Each function draws into a new figure, saves it as PNG when `path` is given,
and returns the figure (`plot_training_curves`, called after every epoch,
closes its figure and returns the path; it lives with the training run,
`training/curves.py`, and is importable from here). The Agg backend is used, so no
display is needed, unless MPLBACKEND names another (Jupyter's inline one).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from keras_transformer.layers import positional_encoding

# The Agg backend is chosen there (unless MPLBACKEND names another), before pyplot loads;
# the training curves are importable from here, with the other figures.
from keras_transformer.training.curves import plot_training_curves, plt  # noqa: F401
from keras_transformer.training.schedules import WarmupSchedule


def _save(fig, path):
    if path is not None:
        fig.savefig(os.fspath(path), dpi=100, bbox_inches="tight")
    return fig


def plot_positional_encoding(length: int = 128, depth: int = 128, path=None):
    """Heat map of the sinusoidal encoding: positions up (0 at the bottom), dimensions across."""
    encoding = positional_encoding(length, depth)
    fig, ax = plt.subplots(figsize=(8, 5))
    image = ax.pcolormesh(encoding, cmap="RdBu", vmin=-1, vmax=1)
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(f"Sinusoidal positional encoding ({length} x {depth})")
    fig.colorbar(image, ax=ax)
    return _save(fig, path)


def plot_learning_rate(d_model: int = 128, warmup_steps: int = 4000, steps: int = 40000, path=None):
    """The warmup schedule's learning rate over `steps` training steps."""
    schedule = WarmupSchedule(d_model, warmup_steps)
    x = np.arange(steps)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, np.asarray(schedule(x)))
    ax.axvline(warmup_steps, color="grey", linestyle=":", label=f"warmup_steps={warmup_steps}")
    ax.set_xlabel("train step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"Warmup schedule (d_model={d_model})")
    ax.legend()
    return _save(fig, path)


def plot_attention_heads(
    attention,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path=None,
    columns: int = 4,
):
    """Cross-attention weights of each head for one sentence.

    Args:
        attention: array `(heads, target_length, source_length)`.
        source_tokens: labels for the source axis (length `source_length`).
        target_tokens: labels for the target axis (length `target_length`).
    """
    attention = np.asarray(attention)
    if attention.ndim != 3:
        raise ValueError(
            f"attention must have shape (heads, target, source); got {attention.shape}"
        )
    heads, target_length, source_length = attention.shape
    if len(source_tokens) != source_length or len(target_tokens) != target_length:
        raise ValueError(
            f"attention is {target_length} x {source_length} (target x source) but "
            f"{len(target_tokens)} target and {len(source_tokens)} source labels were given."
        )
    columns = min(columns, heads)
    rows = -(-heads // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.2 * rows), squeeze=False)
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.axis("off")
            continue
        ax.matshow(attention[head], cmap="viridis", vmin=0)
        ax.set_xticks(range(source_length))
        ax.set_xticklabels(source_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(target_length))
        ax.set_yticklabels(target_tokens, fontsize=7)
        ax.set_xlabel(f"head {head + 1}")
    fig.tight_layout()
    return _save(fig, path)


def translation_attention(translator, text: str, method: str = "greedy", beam_width=None) -> dict:
    """Translates one sentence and returns its last-layer cross-attention, trimmed.

    Args:
        translator: a `Translator` (the eager path; a loaded SavedModel has no
            attention output).
        text: the source sentence.
        method: "greedy" or "beam".

    Returns:
        dict with "attention" `(heads, target, source)` for the decoded tokens
        (each row is the step that produced that target token),
        "source_tokens", "target_tokens" (lists of str) and "translation" (str).
    """
    outputs = translator([text], method=method, beam_width=beam_width, return_attention=True)
    source_tokens = [t.decode("utf-8", "replace") for t in outputs["source_tokens"][0].numpy()]
    target_tokens = [t.decode("utf-8", "replace") for t in outputs["target_tokens"][0].numpy()]
    attention = np.asarray(outputs["attention"])[0, :, : len(target_tokens), : len(source_tokens)]
    return {
        "attention": attention,
        "source_tokens": source_tokens,
        "target_tokens": target_tokens,
        "translation": outputs["translation"].numpy()[0].decode("utf-8", "replace"),
    }


def plot_translation_attention(
    translator, text: str, path=None, method: str = "greedy", beam_width=None, columns: int = 4
):
    """`plot_attention_heads` of the last decoder layer while translating `text`."""
    found = translation_attention(translator, text, method, beam_width)
    fig = plot_attention_heads(
        found["attention"], found["source_tokens"], found["target_tokens"], columns=columns
    )
    fig.suptitle(f"{text}  ->  {found['translation']}", fontsize=9)
    return _save(fig, path)
