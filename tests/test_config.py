"""TrainConfig, the settings of a training run (`config.py`, its checks `config_checks.py`)."""

import dataclasses
import json
from pathlib import Path

import pytest

from keras_transformer import cli
from keras_transformer.layers.options import BLOCK_OPTIONS
from keras_transformer.models.options import MODEL_OPTIONS
from keras_transformer.training import run_dir
from keras_transformer.training.config import MODEL_SIZES, TrainConfig, read_config_file

# A run's config.json as the version before the explicit fields wrote it.
CONFIG_V1 = Path(__file__).parent / "data" / "config_v1.json"


def test_the_model_option_fields_are_the_models_options():
    fields = {f.name: f for f in dataclasses.fields(TrainConfig) if "model_option" in f.metadata}
    assert set(fields) == set(BLOCK_OPTIONS) | set(MODEL_OPTIONS)
    for name, field in fields.items():
        default = {**BLOCK_OPTIONS, **MODEL_OPTIONS}[name]
        assert field.metadata["model_option"] == name
        assert field.default == default, name
        # An option that may be unset (None by default) is typed "int | None" and the like.
        if default is None:
            assert field.type.endswith(" | None"), name
        else:
            assert field.type == type(default).__name__, name
    sizes = [f.name for f in dataclasses.fields(TrainConfig) if f.name in MODEL_SIZES]
    assert sizes == list(MODEL_SIZES)
    TrainConfig().model_kwargs(10, 10)  # every name the model takes is a field


def test_every_field_has_a_type_a_default_and_a_one_line_help():
    for field in dataclasses.fields(TrainConfig):
        assert set(field.type.split(" | ")) <= {"int", "float", "str", "bool", "None"}, field
        assert field.default is not dataclasses.MISSING, field.name
        assert "\n" not in field.metadata["help"] and len(field.metadata["help"]) > 10
        choices = field.metadata.get("choices")
        assert choices is None or field.default in choices, field.name
    assert "corpus: where the pairs come from" in TrainConfig.__doc__


def test_a_config_json_of_the_earlier_version_loads_with_equal_values(tmp_path):
    written = json.loads(CONFIG_V1.read_text())
    config = TrainConfig.from_file(CONFIG_V1)
    # Settings added since take their defaults, which keep the earlier behaviour: model
    # options only (pretrained checkpoints' needs), where the weights start from and a
    # multilingual checkpoint's languages.
    added = {
        name: value
        for name, value in dataclasses.asdict(TrainConfig()).items()
        if name not in written["training"]
    }
    assert set(added) <= set(MODEL_OPTIONS) | {"init_from", "source_language", "target_language"}
    assert dataclasses.asdict(config) == {**written["training"], **added}
    assert read_config_file(CONFIG_V1) == written["training"]
    config.validate()
    # The sections derived from the settings are those the run wrote, so that the run
    # resumes (resume._check_same_run compares them).
    model = written["model"]
    added_options = {name: value for name, value in added.items() if name in MODEL_OPTIONS}
    assert config.model_kwargs(model["input_vocab_size"], model["target_vocab_size"]) == {
        **model,
        **added_options,
    }
    assert config.tokenizer_kwargs() == written["tokenizer"]
    assert {name: getattr(config, name) for name in written["data"]} == written["data"]
    (tmp_path / run_dir.CONFIG_FILE).write_text(CONFIG_V1.read_text())
    assert run_dir.read_config(tmp_path) == written
    # Flat settings files, as --config takes them, load the same.
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps(written["training"]))
    assert TrainConfig.from_file(flat) == config
    # Runs older still lack the settings added since: those take their defaults.
    older = {k: v for k, v in written["training"].items() if k not in ("skip_padding", "seed")}
    flat.write_text(json.dumps({"training": older}))
    assert TrainConfig.from_file(flat) == config


def test_unknown_settings_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^Unknown training settings: \['d_modle'\]\. Known: "):
        TrainConfig.from_dict({"d_modle": 64})
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({"training": {"epochs": 2, "epoch": 3}}))
    with pytest.raises(ValueError, match=rf"\['epoch'\] in config file {path}") as error:
        TrainConfig.from_file(path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "field",
    [f for f in dataclasses.fields(TrainConfig) if "choices" in f.metadata],
    ids=lambda f: f.name,
)
def test_a_value_outside_a_fields_choices_is_refused(field):
    with pytest.raises(ValueError, match=f"{field.name} must be one of"):
        TrainConfig(**{field.name: "nonsense"}).validate()


def test_tie_embeddings_reaches_the_model_config():
    config = TrainConfig(tie_embeddings=True)
    assert config.model_kwargs(100, 120)["tie_embeddings"] is True
    args = cli.build_parser().parse_args(
        ["train", "--run-dir", "x", "--time-budget-minutes", "2.5", "--tie-embeddings", "true"]
        + ["--lr-cooldown", "0.2"]
    )
    parsed = cli.config_from_args(args)
    assert parsed.time_budget_minutes == 2.5 and parsed.tie_embeddings is True
    assert parsed.lr_cooldown == 0.2


@pytest.mark.parametrize(
    "values, message",
    [
        ({"epochs": "x"}, "epochs must be of type int"),
        ({"lower_case": 1}, "lower_case must be of type bool"),
        ({"dropout_rate": "0.1"}, "dropout_rate must be of type float"),
        ({"learning_rate": True}, "learning_rate must be of type float | None"),
    ],
)
def test_settings_of_the_wrong_type_are_refused(values, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        TrainConfig.from_dict(values)


def test_ints_serve_for_floats_and_none_where_allowed():
    config = TrainConfig.from_dict({"dropout_rate": 0, "learning_rate": 1, "batch_tokens": None})
    assert config.dropout_rate == 0 and config.learning_rate == 1 and config.batch_tokens is None


def test_shared_embeddings_need_the_shared_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings=True needs.*shared_vocab=True"):
        TrainConfig(share_embeddings=True).validate()
    TrainConfig(share_embeddings=True, shared_vocab=True).validate()


@pytest.mark.parametrize("share", [-0.1, 1.0])
def test_a_cooldown_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(ValueError, match=r"lr_cooldown must be in \[0, 1\)"):
        TrainConfig(lr_cooldown=share).validate()


def test_subword_alpha_is_a_flag_and_is_checked():
    args = cli.build_parser().parse_args(["train", "--run-dir", "x", "--subword-alpha", "0.3"])
    assert cli.config_from_args(args).subword_alpha == 0.3
    for alpha in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"subword_alpha must be in \[0, 1\]"):
            TrainConfig(subword_alpha=alpha).validate()
    with pytest.raises(ValueError, match="only tokenizer='sentencepiece' can do"):
        TrainConfig(tokenizer="wordpiece", subword_alpha=0.2).validate()
    TrainConfig(tokenizer="wordpiece").validate()
    with pytest.raises(
        ValueError, match="subword_alpha cannot be used with strategy='multi_worker'"
    ):
        TrainConfig(strategy="multi_worker", subword_alpha=0.2).validate()


@pytest.mark.parametrize(
    "values, message",
    [
        ({"label_smoothing": 1.0}, r"label_smoothing must be in \[0, 1\)"),
        ({"val_fraction": 0.0}, r"val_fraction must be in \(0, 1\)"),
        ({"learning_rate": 0.0}, r"learning_rate must be in \(0, inf\)"),
        ({"weight_decay": -0.1}, r"weight_decay must be in \[0, inf\)"),
        ({"clip_norm": 0.0}, r"clip_norm must be in \(0, inf\)"),
        ({"time_budget_minutes": 0.0}, r"time_budget_minutes must be in \(0, inf\)"),
        ({"batch_tokens": 0}, "batch_tokens must be positive"),
        ({"steps_per_epoch": 0}, "steps_per_epoch must be positive"),
        ({"keep_epoch_checkpoints": -1}, "keep_epoch_checkpoints must be 0 or more"),
        # The model's own checks, before any run directory is written.
        ({"d_model": 100, "num_heads": 8}, "must be divisible by `num_heads`"),
        ({"dropout_rate": 1.0}, "dropout_rate"),
        ({"activation": "gleu"}, "gleu"),
        ({"max_tokens": 200, "max_length": 128}, "max_tokens=200 exceeds max_length=128"),
        # Data paths the chosen corpus would not read.
        ({"corpus": "tsv", "tsv": "a.tsv", "src": "a.pt"}, "corpus='tsv' does not read src"),
        ({"src": "a.pt", "tgt": "a.en"}, "corpus='demo' does not read src, tgt"),
        ({"corpus": "tfds", "val_src": "v.pt", "val_tgt": "v.en"}, "own validation split"),
        (
            {"tsv": "a.tsv", "corpus": "tsv", "val_tsv": "v.tsv", "val_src": "v", "val_tgt": "w"},
            "not both",
        ),
    ],
)
def test_settings_out_of_range_are_refused_by_validate(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**values).validate()


def test_unset_optional_settings_and_edges_are_allowed():
    TrainConfig(
        label_smoothing=0.0,
        weight_decay=0.0,
        keep_epoch_checkpoints=0,
        max_tokens=128,
        max_length=128,
        early_stopping_patience=0,
    ).validate()


def test_data_paths_given_as_flags_choose_their_corpus_over_a_files(tmp_path):
    tsv_run = tmp_path / "tsv.json"
    tsv_run.write_text(json.dumps({"corpus": "tsv", "tsv": "old.tsv", "val_tsv": "old_val.tsv"}))
    args = cli.build_parser().parse_args(
        ["train", "--run-dir", "x", "--config", str(tsv_run), "--src", "a.pt", "--tgt", "a.en"]
    )
    config = cli.config_from_args(args)
    assert (config.corpus, config.src, config.tgt, config.tsv) == ("files", "a.pt", "a.en", None)
    assert config.val_tsv == "old_val.tsv"  # not a training path: kept
    config.validate()
    files_run = tmp_path / "files.json"
    files_run.write_text(json.dumps({"corpus": "files", "src": "a.pt", "tgt": "a.en"}))
    args = cli.build_parser().parse_args(
        ["train", "--run-dir", "x", "--config", str(files_run), "--tsv", "b.tsv"]
    )
    config = cli.config_from_args(args)
    assert (config.corpus, config.src, config.tgt, config.tsv) == ("tsv", None, None, "b.tsv")
    # A file's own corpus and paths stay as they are without such flags.
    args = cli.build_parser().parse_args(["train", "--run-dir", "x", "--config", str(tsv_run)])
    assert cli.config_from_args(args).corpus == "tsv"


def test_from_dict_takes_the_corpus_from_the_paths_given():
    assert TrainConfig.from_dict({"src": "a.pt", "tgt": "a.en"}).corpus == "files"
    assert TrainConfig.from_dict({"tsv": "a.tsv"}).corpus == "tsv"
    assert TrainConfig.from_dict({}).corpus == "demo"
    assert TrainConfig.from_dict({"corpus": "tsv", "tsv": "a.tsv"}).corpus == "tsv"
