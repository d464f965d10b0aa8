"""A run that starts from another (`TrainConfig.init_from`): fine-tuning an imported
checkpoint (`keras-transformer import-marian`) or any trained run.

The new run takes the other's model settings (all but the dropout rates, which are
its own), a copy of its tokenizer files (`data_sources.TextSource`: never learned
again, the ids must mean what the weights learned), and the weights of its best
checkpoint; everything else (data, schedule, early stopping) is the new run's own,
and it resumes as any run does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from keras_transformer.models.transformer import Transformer
from keras_transformer.text import prepared
from keras_transformer.training import run_dir as run_dir_lib
from keras_transformer.training.config import TrainConfig

# The model settings a run started from another (`init_from`) keeps as its own.
OWN_MODEL_SETTINGS = ("input_vocab_size", "target_vocab_size", "dropout_rate", "attention_dropout")
# The tokenizer settings (config.json's "tokenizer") that are TrainConfig fields of their
# own name; "kind" is the field `tokenizer`.
_TOKENIZER_FIELDS = ("shared_vocab", "lower_case", "normalization_form", "subword_model")


def settings_of_initial_run(config: TrainConfig) -> TrainConfig:
    """`config` with the model and tokenizer settings of the run it starts from
    (`init_from`): its architecture (all but the dropout rates) and its tokenizer's kind
    and settings, so that its weights and tokenizer files fit."""
    initial = run_dir_lib.read_config(config.init_from)
    model = {k: v for k, v in initial.get("model", {}).items() if k not in OWN_MODEL_SETTINGS}
    tokenizer = run_dir_lib.tokenizer_settings(initial)
    settings = {name: tokenizer[name] for name in _TOKENIZER_FIELDS if name in tokenizer}
    if "vocab_size" in tokenizer:
        settings["vocab_size"] = tokenizer["vocab_size"]
    if tokenizer["kind"] == "multilingual":
        # A run of the languages it names, else of its prepared data's, else of the
        # initial run's own (a fine-tuned one); checked before anything is written.
        prepared_tokenizer = prepared.read_index(config.data)["tokenizer"] if config.data else {}
        languages = {
            name: getattr(config, name) or prepared_tokenizer.get(name) or tokenizer.get(name)
            for name in ("source_language", "target_language")
        }
        settings.update(
            run_dir_lib.checked_languages(config.init_from, languages, str(config.init_from))
        )
    return dataclasses.replace(config, **model, **settings, tokenizer=tokenizer["kind"])


def load_weights(model: Transformer, initial: Path) -> None:
    """`model` takes the weights of the best checkpoint of the run it starts from."""
    start = run_dir_lib.load_model(initial, dtype=None)
    ours = {v.path.split("/", 1)[1]: v for v in model.weights}
    theirs = {v.path.split("/", 1)[1]: v for v in start.weights}
    if ours.keys() != theirs.keys():
        raise ValueError(
            f"{initial / run_dir_lib.BEST_CHECKPOINT} does not hold this model's weights "
            f"(differing: {sorted(ours.keys() ^ theirs.keys())[:3]})."
        )
    for path, variable in ours.items():
        variable.assign(theirs[path])
