"""Calling an export loaded in Python: its signatures over lists of strings, a bounded
batch at a time, with plain Python results. What `keras-transformer translate`,
`score`, `evaluate` and the demo run; writing exports is `export.py`'s.
"""

from __future__ import annotations

import os

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops a loaded SavedModel runs)

from keras_transformer.inference.export import latest_version_dir


def load_translator(path: str | os.PathLike):
    """The exported SavedModel at `path` (a version directory or a model directory)."""
    return tf.saved_model.load(str(latest_version_dir(path)))


def translate_rows(
    saved_model,
    texts: list[str | bytes],
    beam_width: int | None = None,
    batch_size: int = 64,
) -> list[tuple[str, float, bool]]:
    """(translation, score, source_truncated) per text with a loaded SavedModel, `batch_size`
    rows per call. source_truncated is False throughout with exports made before it existed."""
    results: list[tuple[str, float, bool]] = []
    for start in range(0, len(texts), batch_size):
        text = tf.constant(texts[start : start + batch_size], tf.string)
        if beam_width is None:
            outputs = saved_model.signatures["serving_default"](text=text)
        else:
            outputs = saved_model.translate_beam(text, tf.constant(beam_width, tf.int32))
        translations = outputs["translation"].numpy()
        truncated = outputs.get("source_truncated", tf.zeros(len(translations), tf.bool))
        results.extend(
            (t.decode("utf-8", errors="replace"), float(s), bool(c))
            for t, s, c in zip(
                translations, outputs["score"].numpy(), truncated.numpy(), strict=True
            )
        )
    return results


def translate_nbest_rows(
    saved_model,
    texts: list[str | bytes],
    num_hypotheses: int,
    beam_width: int | None = None,
    batch_size: int = 64,
) -> list[tuple[list[tuple[str, float]], bool]]:
    """Each text's `num_hypotheses` best (translation, score), best first, and whether its
    source was cut, with a loaded SavedModel: by beam search of `beam_width` (the
    export's `nbest` signature when None), `batch_size` rows per call."""
    results: list[tuple[list[tuple[str, float]], bool]] = []
    k = tf.constant(num_hypotheses, tf.int32)
    for start in range(0, len(texts), batch_size):
        text = tf.constant(texts[start : start + batch_size], tf.string)
        if beam_width is None:
            outputs = saved_model.signatures["nbest"](text=text, num_hypotheses=k)
        else:
            outputs = saved_model.translate_nbest(text, tf.constant(beam_width, tf.int32), k)
        for translations, scores, cut in zip(
            outputs["translations"].numpy(),
            outputs["scores"].numpy(),
            outputs["source_truncated"].numpy(),
            strict=True,
        ):
            hypotheses = [
                (t.decode("utf-8", errors="replace"), float(s))
                for t, s in zip(translations, scores, strict=True)
            ]
            results.append((hypotheses, bool(cut)))
    return results


def translate_prefixed_rows(
    saved_model,
    texts: list[str | bytes],
    prefixes: list[str | bytes],
    beam_width: int | None = None,
    batch_size: int = 64,
) -> list[tuple[str, float, bool, bool]]:
    """`translate_rows` with each text's translation starting with its target prefix
    (text, one per text; "" for none): greedy, or beam search of `beam_width`. Each row is
    (translation, score, source_truncated, prefix_truncated)."""
    results: list[tuple[str, float, bool, bool]] = []
    for start in range(0, len(texts), batch_size):
        text = tf.constant(texts[start : start + batch_size], tf.string)
        prefix = tf.constant(prefixes[start : start + batch_size], tf.string)
        if beam_width is None:
            outputs = saved_model.translate_with_prefix(text, prefix)
        else:
            outputs = saved_model.translate_beam_with_prefix(
                text, prefix, tf.constant(beam_width, tf.int32)
            )
        results.extend(
            (t.decode("utf-8", errors="replace"), float(s), bool(c), bool(p))
            for t, s, c, p in zip(
                outputs["translation"].numpy(),
                outputs["score"].numpy(),
                outputs["source_truncated"].numpy(),
                outputs["prefix_truncated"].numpy(),
                strict=True,
            )
        )
    return results


def translate_texts(
    saved_model,
    texts: list[str | bytes],
    beam_width: int | None = None,
    batch_size: int = 64,
) -> list[tuple[str, float]]:
    """(translation, score) per text: `translate_rows` without the truncation flag."""
    return [row[:2] for row in translate_rows(saved_model, texts, beam_width, batch_size)]


def score_pairs(saved_model, sources: list[bytes], targets: list[bytes]) -> dict:
    """The `score` signature's outputs (numpy arrays) for one batch of pairs, with a
    loaded SavedModel. An export made before the signature existed is refused."""
    if "score" not in saved_model.signatures:
        raise ValueError(
            "This export has no `score` signature (it was exported before scoring "
            "existed): export the run again."
        )
    outputs = saved_model.signatures["score"](
        source=tf.constant(sources, tf.string, shape=[len(sources)]),
        target=tf.constant(targets, tf.string, shape=[len(targets)]),
    )
    return {key: value.numpy() for key, value in outputs.items()}
