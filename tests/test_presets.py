"""Named presets of training settings (`presets.py`) and their --preset flag."""

import pytest

from keras_transformer import cli
from keras_transformer.training import presets
from keras_transformer.training.config import TrainConfig


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_every_preset_loads_and_validates(name):
    config = TrainConfig.from_dict(presets.settings(name))
    config.validate()
    # A preset defines the recipe, never the data: it serves any corpus.
    assert not {"corpus", "src", "tgt", "tsv", "val_src", "val_tgt"} & set(presets.PRESETS[name])


def test_the_tutorial_preset_is_the_tutorials_recipe():
    config = TrainConfig.from_dict(presets.settings("tutorial"))
    assert (config.tokenizer, config.lower_case, config.learning_rate) == ("wordpiece", True, None)
    assert (config.num_layers, config.d_model, config.num_heads, config.dff) == (4, 128, 8, 512)
    assert (config.warmup_steps, config.batch_size, config.label_smoothing) == (4000, 64, 0.0)


def test_the_small_preset_shares_one_vocabulary_and_every_embedding():
    config = TrainConfig.from_dict(presets.settings("small"))
    assert config.shared_vocab and config.share_embeddings and config.tie_embeddings
    assert config.tokenizer == "sentencepiece" and not config.lower_case


def test_preset_sits_under_the_config_file_and_the_flags(tmp_path):
    config_file = tmp_path / "settings.json"
    config_file.write_text('{"dropout_rate": 0.3, "vocab_size": 6000}')
    args = cli.build_parser().parse_args(
        [
            "train",
            "--run-dir",
            "x",
            "--preset",
            "small",
            "--config",
            str(config_file),
            "--vocab-size",
            "4000",
        ]
    )
    config = cli.config_from_args(args)
    assert config.dropout_rate == 0.3  # the file beats the preset
    assert config.vocab_size == 4000  # the flag beats the file
    assert config.dff == presets.PRESETS["small"]["dff"]  # the preset beats the defaults


def test_unknown_presets_are_named():
    with pytest.raises(ValueError, match="Unknown preset 'big'.*small"):
        presets.settings("big")


def test_presets_are_copies():
    presets.settings("small")["dff"] = 1
    assert presets.PRESETS["small"]["dff"] == 256
