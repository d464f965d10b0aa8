"""TrainConfig, the settings of a training run (`config.py`)."""

from keras_transformer import cli
from keras_transformer.config import TrainConfig


def test_tie_embeddings_reaches_the_model_config():
    config = TrainConfig(tie_embeddings=True)
    assert config.model_kwargs(100, 120)["tie_embeddings"] is True
    args = cli.build_parser().parse_args(
        ["train", "--run-dir", "x", "--time-budget-minutes", "2.5", "--tie-embeddings", "true"]
    )
    parsed = cli.config_from_args(args)
    assert parsed.time_budget_minutes == 2.5 and parsed.tie_embeddings is True
