"""A checkpoint's generation settings, as the library's decoding settings.

transformers' `generate()` decodes a checkpoint with the settings of its
generation_config.json; a checkpoint without one has them in config.json (older
BART-family checkpoints), and what neither sets takes transformers' defaults.
`decoding_settings(DIR)` reads them as transformers 5.x does and returns the
`DecodingOptions` fields that make the library's searches decode as `generate()`
does (`BeamSearch`'s transformers length normalization and early stopping), the
settings that name token ids, raw, for the importer to map to the library's ids,
and the settings the searches cannot honour, for the importer to warn of. The
importer stores the result under the run directory's config.json key "generation",
and `export_run` decodes with it by default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GENERATION_CONFIG_FILE = "generation_config.json"
MODEL_CONFIG_FILE = "config.json"

# transformers' defaults of the settings read here (5.x
# `GenerationConfig._get_default_generation_params`), taken where a checkpoint sets none.
TRANSFORMERS_DEFAULTS: dict[str, Any] = {
    "max_length": 20,
    "max_new_tokens": None,
    "min_length": 0,
    "min_new_tokens": None,
    "num_beams": 1,
    "length_penalty": 1.0,
    "early_stopping": False,
    "do_sample": False,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
    "sequence_bias": None,
    "decoder_start_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}

# The settings that name token ids (and no_repeat_ngram_size, which the importer
# decides on with them), returned raw under "checkpoint_ids".
CHECKPOINT_ID_SETTINGS = (
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "bad_words_ids",
    "no_repeat_ngram_size",
    "eos_token_id",
    "pad_token_id",
)

# Settings the library's searches do not honour: a checkpoint that sets one to other
# than transformers' default has it reported under "unsupported".
UNHONOURED = (
    "do_sample",
    "num_beam_groups",
    "diversity_penalty",
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "min_length",
    "min_new_tokens",
    "suppress_tokens",
    "begin_suppress_tokens",
    "exponential_decay_length_penalty",
    "sequence_bias",
)


def decoding_settings(directory: str | os.PathLike) -> dict[str, Any]:
    """The decoding settings of the checkpoint in `directory`, as the library's.

    Read from generation_config.json, or, without one, from config.json's
    generation keys, as transformers does; what neither sets is transformers'
    default. A value of null counts as unset.

    Args:
        directory: a checkpoint as transformers' `save_pretrained` writes it.

    Returns:
        A dict of:
        beam_width: `num_beams` (1: greedy search); absent where the checkpoint
            sets none, so that a beam search keeps the library's width.
        max_length: the most tokens generated: `max_new_tokens` if set, else
            `max_length` - 1 (transformers' counts the decoder's start token).
        length_penalty_alpha: `length_penalty`, the exponent of transformers'
            length normalization.
        length_normalization: "transformers".
        early_stopping: True, False or "never".
        max_length_a: None: `generate()` has no cap relative to the source.
        end_at_max_length: whether a row that reaches `max_length` ends with
            `</s>` there (a `forced_eos_token_id`), or as it is.
        checkpoint_ids: the settings of `CHECKPOINT_ID_SETTINGS` (forced first
            and last tokens, banned words, the decoder's start, end and padding
            ids, no_repeat_ngram_size), raw: the checkpoint's ids, for the
            importer to map to the library's.
        unsupported: {setting: value} for what the searches cannot honour:
            sampling, beam groups and diversity, repetition penalties, n-gram
            blocking, minimum lengths, suppressed or biased tokens, words banned
            beyond padding, and a `forced_eos_token_id` other than the end
            token. Empty when the searches decode as `generate()` does.
        source: the file the settings were read from, or None (defaults only).

    Raises:
        ValueError: a settings file that is not a JSON object, or a value the
            searches cannot take (`num_beams` or `max_length` below 1, an
            unknown `early_stopping`); naming the file and the setting.
    """
    directory = Path(directory)
    given, source = _read_settings(directory)
    settings = {name: _value(given, name) for name in TRANSFORMERS_DEFAULTS}
    where = source or "transformers' defaults"
    for name in ("decoder_start_token_id", "eos_token_id", "pad_token_id"):
        # The model's own ids, where a generation_config.json leaves them out.
        if settings[name] is None and source == GENERATION_CONFIG_FILE:
            settings[name] = _model_config(directory).get(name)
    if settings["max_new_tokens"] is not None:
        max_length = int(settings["max_new_tokens"])
    else:
        max_length = int(settings["max_length"]) - 1
    if max_length < 1:
        raise ValueError(
            f"{where}: `max_length` leaves no token to generate (it counts the decoder's "
            f"start). Received: max_length={settings['max_length']}, "
            f"max_new_tokens={settings['max_new_tokens']}"
        )
    num_beams = settings["num_beams"]
    if not isinstance(num_beams, int) or num_beams < 1:
        raise ValueError(f"{where}: `num_beams` must be a positive integer. Received: {num_beams}")
    early_stopping = settings["early_stopping"]
    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        raise ValueError(
            f'{where}: `early_stopping` must be true, false or "never". '
            f"Received: {early_stopping!r}"
        )
    settings_out = {
        "beam_width": num_beams,
        "max_length": max_length,
        "length_penalty_alpha": float(settings["length_penalty"]),
        "length_normalization": "transformers",
        "early_stopping": early_stopping,
        "max_length_a": None,
        # transformers' `forced_eos_token_id` ends a row at max_length with `</s>`.
        "end_at_max_length": bool(_ids(settings["forced_eos_token_id"])),
        "checkpoint_ids": {name: settings[name] for name in CHECKPOINT_ID_SETTINGS},
        "unsupported": _unsupported(settings),
        "source": source,
    }
    if given.get("num_beams") is None:
        # transformers' default (1) makes `generate()` greedy; the export's beam search
        # signatures keep the library's width (`DecodingOptions.beam_width`).
        del settings_out["beam_width"]
    return settings_out


def _read_settings(directory: Path) -> tuple[dict, str | None]:
    """The settings file's keys (generation_config.json, else config.json) and its name,
    or `({}, None)` without either."""
    for name in (GENERATION_CONFIG_FILE, MODEL_CONFIG_FILE):
        path = directory / name
        if path.is_file():
            return _json_object(path), name
    return {}, None


def _model_config(directory: Path) -> dict:
    path = directory / MODEL_CONFIG_FILE
    return _json_object(path) if path.is_file() else {}


def _json_object(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path.name}: not JSON ({error})") from error
    if not isinstance(value, dict):
        raise ValueError(f"{path.name}: expected a JSON object, got {type(value).__name__}")
    return value


def _value(given: dict, name: str):
    """`given`'s value of `name`, or transformers' default where it is missing or null."""
    value = given.get(name)
    return TRANSFORMERS_DEFAULTS[name] if value is None else value


def _unsupported(settings: dict) -> dict[str, Any]:
    """The settings the library's searches do not honour (`decoding_settings`)."""
    unsupported = {
        name: settings[name] for name in UNHONOURED if settings[name] != TRANSFORMERS_DEFAULTS[name]
    }
    pad, eos = settings["pad_token_id"], settings["eos_token_id"]
    # The searches never emit padding, as transformers' checkpoints ban it; any other
    # banned word they would emit.
    banned = settings["bad_words_ids"]
    if banned is not None and any(list(words) != [pad] for words in banned):
        unsupported["bad_words_ids"] = banned
    # A row that reaches max_length ends with the end token (`end_at_max_length`) or as it
    # is; a forced last token other than the end token has no place here.
    if _ids(settings["forced_eos_token_id"]) not in ([], _ids(eos)[:1]):
        unsupported["forced_eos_token_id"] = settings["forced_eos_token_id"]
    return unsupported


def _ids(value) -> list:
    """An id setting (None, an id, or a list of ids, as `eos_token_id` may be) as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
