"""SavedModel export in the TF Serving layout: `<export_root>/<name>/<version>/`.

The SavedModel holds the tokenizers, the weights and the decoding loops, and
needs nothing but TensorFlow and tensorflow-text to run. Its signatures, the
rows of `SIGNATURES`:

    serving_default: text (string, [None]) -> translation (string, [None]),
                     score (float32, [None]),
                     source_truncated (bool, [None])    greedy decoding
    beam_search:     same input and outputs             beam search, the exported width
    score:           source, target (string, [None]) -> score, normalized_score (float32,
                     [None]), token_scores (float32, [None, None]), length (int32, [None]),
                     source_truncated, target_truncated (bool, [None])
                                                        given translations, teacher-forced
    nbest:           text (string, [None]), num_hypotheses (int32, scalar k) ->
                     translations (string, [None, k]), scores (float32, [None, k]),
                     source_truncated (bool, [None])    each row's k best by beam search
    greedy_with_prefix:      text, prefix (string, [None] each) -> serving_default's
                             outputs and prefix_truncated (bool, [None])
    beam_search_with_prefix: same inputs and outputs, by beam search

A multilingual checkpoint's export (NLLB-200, M2M-100, mBART-50: `MultilingualTranslator`)
has the same signatures, each with two more string `[None]` inputs, `source_language`
and `target_language`: a code per row, or one for the whole request (an unknown code
fails the request with an InvalidArgument error naming it).

`source_truncated` is True for a row whose source was longer than the export's
source limit and was cut there; `target_truncated`, for a target longer than its
most generated tokens (`inference.scoring`). `prefix` is target-side text the
row's translation starts with ("" for none); a prefix over `max_length - 1`
tokens is cut there and flagged in `prefix_truncated`. TF Serving needs every
input of a signature, hence signatures of their own for prefixes. Loaded with
`tf.saved_model.load`, it also offers `translate(text)`, `translate_beam(text,
beam_width)` (any width), `translate_nbest(text, beam_width, num_hypotheses)`,
`translate_with_prefix(text, prefix)` and `translate_beam_with_prefix(text,
prefix, beam_width)` with token ids, `score(source, target)`, and
`serving_limits()`: the source limit, the rows decoded together, the most
generated tokens and the beam width it was exported with. An export made with
fewer signatures (`signatures=`, `keras-transformer export --signatures`) offers
only the methods its signatures call, and `serving_limits()`. Calling a loaded
export from Python is `loaded_export.py`'s.

An export computes in float32, or with `compute_dtype="bfloat16"` in bfloat16, and
records which in `assets.extra/keras_transformer.json` (`EXPORT_INFO_FILE`).

It stays one module: the signatures' table, the version directories and the staged
write are the pieces of one act, writing an export; reading one is `loaded_export.py`'s,
which takes the table from here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops a loaded SavedModel runs)

from keras_transformer.inference.scoring import SCORE_OUTPUTS, SOURCE_SPEC, TARGET_SPEC
from keras_transformer.inference.translator import (
    LANGUAGE_SPECS,
    NUM_HYPOTHESES_SPEC,
    PREFIX_SPEC,
    TEXT_SPEC,
    MultilingualTranslator,
    Translator,
    translator_class,
)
from keras_transformer.training.checkpoints import with_dtype
from keras_transformer.training.run_dir import load_run
from keras_transformer_commands import EXPORT_INFO_FILE

DEFAULT_EXPORT_ROOT = "saved_models"
# What an export's weights and matrix products may compute in. bfloat16 halves the
# weights and runs matrix products at about twice float32's speed on CPUs that compute it
# (AVX512_BF16, AMX) with oneDNN's kernels; softmax, log-probabilities, layer norms'
# statistics and scores stay float32 (docs/serving.md, "bfloat16 exports").
EXPORT_DTYPES = ("float32", "bfloat16")
SIGNATURE_OUTPUTS = ("translation", "score", "source_truncated")
NBEST_OUTPUTS = ("translations", "scores", "source_truncated")
PREFIX_OUTPUTS = (*SIGNATURE_OUTPUTS, "prefix_truncated")


def next_version(model_dir: str | os.PathLike) -> int:
    """One more than the largest integer version directory under `model_dir` (1 if none)."""
    model_dir = Path(model_dir)
    versions = [int(p.name) for p in model_dir.glob("*") if p.is_dir() and p.name.isdigit()]
    return max(versions, default=0) + 1


# Staging directories: ".VERSION-PID-XXXXXXXX", or ".VERSION-XXXXXXXX" from earlier versions.
_STAGING = re.compile(r"\.\d+-(?:(\d+)-)?\w{8}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_staging(model_dir: str | os.PathLike) -> list[Path]:
    """Deletes the staging directories that killed exports left under `model_dir`.

    One is stale when the process its name records runs no more on this
    machine (an export of this version in progress keeps its own); those of
    earlier versions, which cleaned up unless killed, always are.
    """
    removed = []
    for path in Path(model_dir).glob(".*"):
        match = _STAGING.fullmatch(path.name)
        if match and path.is_dir() and not (match.group(1) and _running(int(match.group(1)))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def latest_version_dir(path: str | os.PathLike) -> Path:
    """`path` itself if it is a SavedModel, else its highest integer version directory."""
    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    versions = sorted(
        int(p.name) for p in path.glob("*") if p.name.isdigit() and (p / "saved_model.pb").is_file()
    )
    if not versions:
        raise FileNotFoundError(
            f"No SavedModel at {path}: expected {path}/saved_model.pb or {path}/<version>/"
        )
    return path / str(versions[-1])


class Signature(NamedTuple):
    """A signature of the export, a row of `SIGNATURES`.

    name: the signature's name in the SavedModel.
    method: the traced `Translator` method it calls.
    inputs: the specs of its inputs; a spec's name is both the signature's input
        key and the method's argument it is passed as.
    outputs: the method's outputs it returns.
    fixed: the method's arguments bound when exporting, each to the translator's
        option of that name (`DecodingOptions`: the exported beam width).
    """

    name: str
    method: str
    inputs: tuple[tf.TensorSpec, ...]
    outputs: tuple[str, ...]
    fixed: tuple[str, ...] = ()


# The beam searches of the signatures search with the width the export is made with.
EXPORTED_WIDTH = ("beam_width",)
SIGNATURES = (
    Signature("serving_default", "translate", (TEXT_SPEC,), SIGNATURE_OUTPUTS),
    Signature("beam_search", "translate_beam", (TEXT_SPEC,), SIGNATURE_OUTPUTS, EXPORTED_WIDTH),
    Signature("score", "score", (SOURCE_SPEC, TARGET_SPEC), SCORE_OUTPUTS),
    Signature(
        "nbest", "translate_nbest", (TEXT_SPEC, NUM_HYPOTHESES_SPEC), NBEST_OUTPUTS, EXPORTED_WIDTH
    ),
    Signature(
        "greedy_with_prefix", "translate_with_prefix", (TEXT_SPEC, PREFIX_SPEC), PREFIX_OUTPUTS
    ),
    Signature(
        "beam_search_with_prefix",
        "translate_beam_with_prefix",
        (TEXT_SPEC, PREFIX_SPEC),
        PREFIX_OUTPUTS,
        EXPORTED_WIDTH,
    ),
)


SIGNATURE_NAMES = tuple(signature.name for signature in SIGNATURES)


def chosen_signatures(names=None) -> tuple[Signature, ...]:
    """The rows of `SIGNATURES` named in `names` (all of them when None), in the table's
    order; an unknown or repeated name, or none at all, is a ValueError naming them."""
    if names is None:
        return SIGNATURES
    names = [names] if isinstance(names, str) else list(names)
    unknown = [name for name in names if name not in SIGNATURE_NAMES]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(
            "`signatures` must name one or more of the export's signatures, each once: "
            f"{', '.join(SIGNATURE_NAMES)}. Received: signatures={names!r}"
        )
    return tuple(signature for signature in SIGNATURES if signature.name in names)


def with_languages(signatures: tuple[Signature, ...]) -> tuple[Signature, ...]:
    """`signatures` as a multilingual export has them: each also takes `source_language`
    and `target_language` (string `[None]`: a code per row, or one for the request)."""
    return tuple(
        signature._replace(inputs=(*signature.inputs, *LANGUAGE_SPECS)) for signature in signatures
    )


def _hide_other_methods(translator: Translator, signatures: tuple[Signature, ...]) -> None:
    """Hides from `translator` (the copy an export saves) the traced methods that no
    signature of `signatures` calls. `tf.saved_model.save` saves every `tf.function`
    attribute of the object it is given, tracing each, so a method left visible would cost
    the export its tracing (a search is most of an export's time) and stay callable in the
    loaded export; an instance attribute of None shadows it."""
    called = {signature.method for signature in signatures}
    for signature in SIGNATURES:
        if signature.method not in called:
            setattr(translator, signature.method, None)


def _signature_functions(translator: Translator, signatures: tuple[Signature, ...]) -> dict:
    """`signatures` as the `tf.function`s `tf.saved_model.save` takes, by name."""

    def function_of(signature: Signature):
        method = getattr(translator, signature.method)
        fixed = {name: tf.constant(getattr(translator.options, name)) for name in signature.fixed}
        names = [spec.name for spec in signature.inputs]

        @tf.function(input_signature=list(signature.inputs), autograph=False)
        def call(*inputs):
            outputs = method(**dict(zip(names, inputs, strict=True)), **fixed)
            return {key: outputs[key] for key in signature.outputs}

        return call

    return {signature.name: function_of(signature) for signature in signatures}


def export_translator(
    translator_or_model,
    export_root: str | os.PathLike = DEFAULT_EXPORT_ROOT,
    name: str = "translator",
    version: int | None = None,
    source_tokenizer=None,
    target_tokenizer=None,
    signatures=None,
    compute_dtype: str | None = None,
    **translator_kwargs,
) -> Path:
    """Writes a SavedModel to `export_root/name/version/` and returns that path.

    Args:
        translator_or_model: a `Translator`, or a `Transformer` with
            `source_tokenizer` and `target_tokenizer`. What is saved is always
            a new translator built with the same arguments and frozen fused
            weights (`Translator.frozen()`), taken from the model's weights as
            they are now; a given translator itself is left as it is.
        export_root: directory of TF Serving models. Defaults to "saved_models".
        name: the model name TF Serving serves it under.
        version: integer version; defaults to the next free one. An existing
            version is never overwritten.
        source_tokenizer: the source tokenizer of the run, when a model is
            given; saved inside the SavedModel. Defaults to None.
        target_tokenizer: the target tokenizer of the run, when a model is
            given. Defaults to None.
        signatures: the names of the signatures to export (rows of `SIGNATURES`,
            e.g. `["serving_default"]`); the loaded export offers only the methods
            they call, and `serving_limits`. Each signature left out makes the
            export faster to write and smaller to load. Defaults to None (all six).
        compute_dtype: one of `EXPORT_DTYPES`: "bfloat16" saves the model's weights
            rounded to bfloat16, computing its matrix products in it. Defaults to None
            (the model's own: float32 for a run's `load_run`).
        **translator_kwargs: `Translator` arguments (max_length,
            max_source_length, sub_batch_size, beam_width, ...) when a model
            is given.
    """
    if isinstance(translator_or_model, Translator):
        if source_tokenizer or target_tokenizer or translator_kwargs:
            raise ValueError("Give tokenizers and translator arguments only with a model.")
        given = translator_or_model
    else:
        if source_tokenizer is None or target_tokenizer is None:
            raise ValueError(
                "Exporting a model needs its `source_tokenizer` and `target_tokenizer`."
            )
        given = translator_class(source_tokenizer)(
            translator_or_model, source_tokenizer, target_tokenizer, **translator_kwargs
        )
    exported = chosen_signatures(signatures)
    if isinstance(given, MultilingualTranslator):
        exported = with_languages(exported)
    if compute_dtype is not None:
        check_compute_dtype(compute_dtype)
    check_export_name(name)
    model_dir = Path(export_root) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    version = next_version(model_dir) if version is None else int(version)
    if version <= 0:
        raise ValueError(f"`version` must be a positive integer. Received: version={version}")
    target = model_dir / str(version)
    if target.exists():
        raise FileExistsError(f"{target} exists; pick another version or leave it unset.")
    model = given.model  # rounded only now, after the checks: a copy of every weight
    if compute_dtype is not None:
        model = with_dtype(model, compute_dtype, round_weights=True)
    translator = given.frozen(model)
    _hide_other_methods(translator, exported)
    # Write beside the target and rename: TF Serving polls the directory and
    # must never see a half-written version.
    remove_stale_staging(model_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-{os.getpid()}-", dir=model_dir))
    try:
        functions = _signature_functions(translator, exported)
        tf.saved_model.save(translator, str(staging), signatures=functions)
        info = staging / EXPORT_INFO_FILE
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(json.dumps({"compute_dtype": model.compute_dtype}) + "\n")
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def export_run(
    run_dir: str | os.PathLike,
    export_root: str | os.PathLike = DEFAULT_EXPORT_ROOT,
    name: str | None = None,
    version: int | None = None,
    average_last: int | None = None,
    **translator_kwargs,
) -> Path:
    """Exports the best checkpoint of a training run directory (see `run_dir.py`), or with
    `average_last=N` the average of its last N epoch checkpoints, computing in float32
    whatever policy the run trained under (`run_dir.load_model`), or in bfloat16 with
    `compute_dtype="bfloat16"`.

    Sources are cut where the run's training cut them (`source_limit_of_run`)
    unless `max_source_length` is given. A run imported from a published
    checkpoint decodes as the checkpoint's generation settings say (its config's
    "generation": `pretrained.generation.decoding_settings`): they are the
    defaults of `beam_width`, `max_length`, `length_penalty_alpha`,
    `length_normalization`, `early_stopping`, `max_length_a` and
    `end_at_max_length`, which the arguments given override.

    Args:
        run_dir: the training run directory.
        export_root: directory of TF Serving models. Defaults to "saved_models".
        name: the model name TF Serving serves it under. Defaults to the run
            directory's name.
        version: integer version; defaults to the next free one.
        average_last: export the average of the run's last N epoch
            checkpoints (kept with `keep_epoch_checkpoints`) instead of its
            best checkpoint. Defaults to None (the best).
        **translator_kwargs: `Translator` arguments (max_source_length,
            sub_batch_size, beam_width, ...) and `export_translator`'s `signatures`
            and `compute_dtype`.
            Of the seven the generation settings give, one given as None takes
            theirs (but `max_length_a=None` turns the cap off).

    Returns:
        the version directory written.
    """
    # Mistakes, before the run loads.
    chosen_signatures(translator_kwargs.get("signatures"))
    if translator_kwargs.get("compute_dtype") is not None:
        check_compute_dtype(translator_kwargs["compute_dtype"])
    model, source_tokenizer, target_tokenizer, config = load_run(run_dir, average_last=average_last)
    if translator_kwargs.get("max_source_length") is None:
        translator_kwargs["max_source_length"] = source_limit_of_run(config)
    generation = config.get("generation", {})
    for setting in (
        "beam_width",
        "max_length",
        "length_penalty_alpha",
        "length_normalization",
        "early_stopping",
        "max_length_a",
        "end_at_max_length",
    ):
        # None means "no cap" for max_length_a alone; for the others, "not given".
        given = setting in translator_kwargs and (
            translator_kwargs[setting] is not None or setting == "max_length_a"
        )
        if setting in generation and not given:
            translator_kwargs[setting] = generation[setting]
    return export_translator(
        model,
        export_root,
        name or Path(run_dir).resolve().name,
        version,
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        **translator_kwargs,
    )


def check_compute_dtype(compute_dtype: str) -> None:
    if compute_dtype not in EXPORT_DTYPES:
        raise ValueError(
            f"`compute_dtype` must be one of {', '.join(EXPORT_DTYPES)}. "
            f"Received: compute_dtype={compute_dtype!r}"
        )


def source_limit_of_run(config: dict) -> int | None:
    """The longest source a training run learned from, [START] and [END] included: its
    `max_tokens` (longer sources were cut or dropped), within the model's max_length.
    None for a run whose config.json does not record it (the Translator's default then)."""
    limit = config.get("training", {}).get("max_tokens")
    if limit is None:
        return None
    positions = config.get("model", {}).get("max_length")
    return int(limit) if positions is None else min(int(limit), int(positions))


def check_export_name(name: str) -> None:
    """An export's name is one directory under the export root."""
    if not name or os.sep in name or name in (".", ".."):
        raise ValueError(f"`name` must be a plain directory name. Received: name={name!r}")
