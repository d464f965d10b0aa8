"""Calling an export loaded in Python: its signatures over lists of strings, a bounded
batch at a time, with plain Python results. What `keras-transformer translate`,
`score`, `evaluate` and the demo run; writing exports is `export.py`'s.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops a loaded SavedModel runs)

from keras_transformer.inference.bfloat16 import slow_bfloat16_reason
from keras_transformer.inference.export import (
    NBEST_OUTPUTS,
    PREFIX_OUTPUTS,
    SIGNATURE_OUTPUTS,
    SIGNATURES,
    latest_version_dir,
)
from keras_transformer.inference.scoring import SCORE_OUTPUTS
from keras_transformer_commands import export_compute_dtype


class SlowExportWarning(RuntimeWarning):
    """A loaded export will run slower here than it would elsewhere (`load_translator`)."""


def load_translator(path: str | os.PathLike):
    """The exported SavedModel at `path` (a version directory or a model directory).

    A bfloat16 export warns (`SlowExportWarning`) where this machine would emulate its
    matrix products (`bfloat16.slow_bfloat16_reason`).
    """
    version_dir = latest_version_dir(path)
    if export_compute_dtype(version_dir) == "bfloat16":
        reason = slow_bfloat16_reason()
        if reason is not None:
            message = f"{version_dir} computes in bfloat16, but {reason}."
            warnings.warn(message, SlowExportWarning, stacklevel=2)
    return tf.saved_model.load(str(version_dir))


def signature_of(saved_model, name: str):
    """The loaded export's signature `name`, or a ValueError saying how to get it."""
    if name not in saved_model.signatures:
        _refuse(saved_model, f"`{name}` signature", name)
    return saved_model.signatures[name]


def method_of(saved_model, name: str):
    """The loaded export's traced method `name` (one of `SIGNATURES`' methods), or a
    ValueError naming the signature whose export offers it."""
    method = getattr(saved_model, name, None)
    if method is None:
        (signature,) = [row.name for row in SIGNATURES if row.method == name]
        _refuse(saved_model, f"`{name}` method (the `{signature}` signature's)", signature)
    return method


def _refuse(saved_model, missing: str, signature: str):
    offered = ", ".join(sorted(saved_model.signatures)) or "no signatures"
    raise ValueError(
        f"This export has no {missing}: it offers {offered}. Export the run again "
        f"with {signature} among its signatures (all six unless `--signatures` or "
        "`signatures=` names fewer; exports made before a signature existed lack it too)."
    )


def export_languages(saved_model) -> list[str] | None:
    """A multilingual export's language codes, sorted; None for a single-pair export."""
    method = getattr(saved_model, "languages", None)
    return None if method is None else [code.decode() for code in method().numpy()]


def checked_languages(saved_model, source_language, target_language) -> dict | None:
    """The `languages` argument of the functions below for a loaded export: None for a
    single-pair export (which refuses languages), both codes for a multilingual one; a
    ValueError in one line names a missing or unknown code."""
    known = export_languages(saved_model)
    given = {"source_language": source_language, "target_language": target_language}
    if known is None:
        if source_language is not None or target_language is not None:
            raise ValueError(
                "This export translates one language pair: it takes no source or target language."
            )
        return None
    shown = ", ".join(known[:5]) + (f", ... ({len(known)} in all)" if len(known) > 5 else "")
    for name, code in given.items():
        if code is None:
            raise ValueError(
                f"This export is multilingual: give its {name.replace('_', ' ')} (codes such "
                f"as {shown})."
            )
        if code not in known:
            raise ValueError(
                f"Unknown {name.replace('_', ' ')} {code!r}; this export knows {shown}."
            )
    return given


def _call_in_batches(
    function, columns: dict[str, list], keys: tuple[str, ...], batch_size: int
) -> dict[str, np.ndarray]:
    """`function`'s outputs named in `keys` (those it gives) for the rows of `columns`, as
    numpy arrays joined along the rows.

    `function` is called with `batch_size` rows at a time, each column passed as a
    string tensor under its key. It is called once at least, so that no rows give
    outputs of no rows in the shapes `function` gives them. The outputs kept must
    agree from batch to batch in every dimension but the first.
    """
    rows = len(next(iter(columns.values())))
    batches = []
    for start in range(0, max(rows, 1), batch_size):
        batch = {key: column[start : start + batch_size] for key, column in columns.items()}
        outputs = function(**{key: _strings(texts) for key, texts in batch.items()})
        batches.append({key: outputs[key].numpy() for key in keys if key in outputs})
    return {key: np.concatenate([batch[key] for batch in batches]) for key in batches[0]}


def _language_columns(languages: dict | None, rows: int) -> dict[str, list]:
    """A multilingual export's language inputs as columns of `rows` rows: {} without
    `languages` ({"source_language": code, "target_language": code})."""
    return {name: [code] * rows for name, code in (languages or {}).items()}


def _strings(texts: list[str | bytes]) -> tf.Tensor:
    return tf.constant(texts, tf.string, shape=[len(texts)])


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def translate_rows(
    saved_model,
    texts: list[str | bytes],
    beam_width: int | None = None,
    batch_size: int = 64,
    languages: dict | None = None,
) -> list[tuple[str, float, bool]]:
    """(translation, score, source_truncated) per text with a loaded SavedModel, `batch_size`
    rows per call. source_truncated is False throughout with exports made before it existed.
    A multilingual export takes `languages`: {"source_language": code, "target_language":
    code}."""
    columns = {"text": texts, **_language_columns(languages, len(texts))}
    outputs = _call_in_batches(
        row_search(saved_model, beam_width), columns, SIGNATURE_OUTPUTS, batch_size
    )
    translations = outputs["translation"]
    truncated = outputs.get("source_truncated", np.zeros(len(translations), bool))
    return [
        (_text(t), float(s), bool(c))
        for t, s, c in zip(translations, outputs["score"], truncated, strict=True)
    ]


def row_search(saved_model, beam_width: int | None = None):
    """What `translate_rows` calls: the export's `serving_default` signature, or its beam
    search of `beam_width`; what the export lacks is refused here, before any call."""
    if beam_width is None:
        return signature_of(saved_model, "serving_default")
    width = tf.constant(beam_width, tf.int32)
    translate_beam = method_of(saved_model, "translate_beam")

    def search(text, **languages):
        return translate_beam(text=text, beam_width=width, **languages)

    return search


def translate_nbest_rows(
    saved_model,
    texts: list[str | bytes],
    num_hypotheses: int,
    beam_width: int | None = None,
    batch_size: int = 64,
    languages: dict | None = None,
) -> list[tuple[list[tuple[str, float]], bool]]:
    """Each text's `num_hypotheses` best (translation, score), best first, and whether its
    source was cut, with a loaded SavedModel: by beam search of `beam_width` (the
    export's `nbest` signature when None), `batch_size` rows per call; `languages` as
    for `translate_rows`."""
    k = tf.constant(num_hypotheses, tf.int32)
    if beam_width is None:
        nbest = signature_of(saved_model, "nbest")

        def search(text, **languages):
            return nbest(text=text, num_hypotheses=k, **languages)
    else:
        width = tf.constant(beam_width, tf.int32)
        translate_nbest = method_of(saved_model, "translate_nbest")

        def search(text, **languages):
            return translate_nbest(text=text, beam_width=width, num_hypotheses=k, **languages)

    columns = {"text": texts, **_language_columns(languages, len(texts))}
    outputs = _call_in_batches(search, columns, NBEST_OUTPUTS, batch_size)
    return [
        ([(_text(t), float(s)) for t, s in zip(translations, scores, strict=True)], bool(cut))
        for translations, scores, cut in zip(
            outputs["translations"], outputs["scores"], outputs["source_truncated"], strict=True
        )
    ]


def translate_prefixed_rows(
    saved_model,
    texts: list[str | bytes],
    prefixes: list[str | bytes],
    beam_width: int | None = None,
    batch_size: int = 64,
    languages: dict | None = None,
) -> list[tuple[str, float, bool, bool]]:
    """`translate_rows` with each text's translation starting with its target prefix
    (text, one per text; "" for none): greedy, or beam search of `beam_width`. Each row is
    (translation, score, source_truncated, prefix_truncated); `languages` as for
    `translate_rows`."""
    if beam_width is None:
        search = method_of(saved_model, "translate_with_prefix")
    else:
        width = tf.constant(beam_width, tf.int32)
        translate_beam_with_prefix = method_of(saved_model, "translate_beam_with_prefix")

        def search(text, prefix, **languages):
            return translate_beam_with_prefix(
                text=text, prefix=prefix, beam_width=width, **languages
            )

    columns = {"text": texts, "prefix": prefixes, **_language_columns(languages, len(texts))}
    outputs = _call_in_batches(search, columns, PREFIX_OUTPUTS, batch_size)
    return [
        (_text(t), float(s), bool(c), bool(p))
        for t, s, c, p in zip(
            outputs["translation"],
            outputs["score"],
            outputs["source_truncated"],
            outputs["prefix_truncated"],
            strict=True,
        )
    ]


def translate_texts(
    saved_model,
    texts: list[str | bytes],
    beam_width: int | None = None,
    batch_size: int = 64,
    languages: dict | None = None,
) -> list[tuple[str, float]]:
    """(translation, score) per text: `translate_rows` without the truncation flag."""
    rows = translate_rows(saved_model, texts, beam_width, batch_size, languages)
    return [row[:2] for row in rows]


def score_pairs(
    saved_model, sources: list[bytes], targets: list[bytes], languages: dict | None = None
) -> dict:
    """The `score` signature's outputs (numpy arrays) for one batch of pairs, with a
    loaded SavedModel (`languages` as for `translate_rows`). An export without the
    signature is refused."""
    score = signature_of(saved_model, "score")
    pairs = {"source": sources, "target": targets, **_language_columns(languages, len(sources))}
    # One call for all the pairs; the signature itself refuses unequal row counts.
    one_batch = max(len(sources), len(targets), 1)
    return _call_in_batches(score, pairs, SCORE_OUTPUTS, one_batch)
