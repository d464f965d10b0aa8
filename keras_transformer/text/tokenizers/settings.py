"""Tokenizer settings that need no TensorFlow: what a run's config checks and records.

The tokenizers themselves run in TensorFlow graphs (tensorflow-text); a
config is checked, and prepared data trains, where TensorFlow is absent.
"""

from __future__ import annotations

NORMALIZATION_FORMS = ("NFC", "NFKC", "NFD", "NFKD")


def check_normalization_form(normalization_form: str | None) -> str | None:
    """`normalization_form` in capitals ("nfc" -> "NFC"), or None for None or "".

    Raises ValueError for a form tensorflow-text does not know.
    """
    if not normalization_form:
        return None
    if str(normalization_form).upper() not in NORMALIZATION_FORMS:
        raise ValueError(
            f"`normalization_form` must be one of {NORMALIZATION_FORMS} or None. "
            f"Received: normalization_form={normalization_form!r}"
        )
    return str(normalization_form).upper()


SUBWORD_MODELS = ("unigram", "bpe")
# Byte fallback adds one piece per byte value, after the reserved ones.
BYTE_PIECES = 256


def check_subword_alpha(alpha: float) -> None:
    """`subword_alpha` is 0 (no sampling) or a sampling alpha in (0, 1]."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"subword_alpha must be in [0, 1]. Received: subword_alpha={alpha}")
