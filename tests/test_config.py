"""TrainConfig, the settings of a training run (`config.py`)."""

import pytest

from keras_transformer import cli
from keras_transformer.config import TrainConfig


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
