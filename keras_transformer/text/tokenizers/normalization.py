"""The text normalization every tokenizer applies before tokenizing, as a TensorFlow function.

It runs inside the tokenizers' graphs (and so inside an exported SavedModel),
and users and tests can call it to compute what a tokenizer makes of a text:
a SentencePiece tokenizer gives back exactly `normalize_text(x, ...)`.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.text.tokenizers.settings import (  # noqa: F401  (their home before)
    NORMALIZATION_FORMS,
    check_normalization_form,
)

# Runs of whitespace: ASCII whitespace, every Unicode space separator (no-break
# space U+00A0, narrow no-break space U+202F, ...) and SentencePiece's own
# word-boundary mark U+2581, which its decoder writes back as a space.
WHITESPACE_RUN = r"[\s\p{Z}\x{2581}]+"


def normalize_text(strings, lower_case=True, normalization_form="NFC", collapse_whitespace=False):
    """The text normalization applied before tokenization.

    In order: undecodable bytes are replaced (U+FFFD) rather than failing the
    batch; the text is lowercased if `lower_case`; it is put in Unicode
    `normalization_form` (None skips it); and with `collapse_whitespace` every
    run of whitespace becomes one space and the ends are stripped.

    Lowercasing is Unicode lowercasing, which keeps accents (á stays á) and
    the German ß; Unicode case folding would turn "straße" into "strasse", a
    word the references do not contain.

    Args:
        strings: string tensor of any shape.
        lower_case: bool. Lowercase the text.
        normalization_form: "NFC", "NFKC", "NFD", "NFKD" or None.
        collapse_whitespace: bool. Make every whitespace run one space and strip
            the ends (SentencePiece tokenizers do: their decoder cannot restore
            leading or repeated whitespace).
    """
    normalization_form = check_normalization_form(normalization_form)
    strings = tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    if lower_case:
        strings = tf.strings.lower(strings, encoding="utf-8")
    if normalization_form:
        strings = tf_text.normalize_utf8(strings, normalization_form)
    if collapse_whitespace:
        strings = tf.strings.strip(tf.strings.regex_replace(strings, WHITESPACE_RUN, " "))
    return strings
