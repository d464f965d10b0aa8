"""A training run, one module per concern.

- `run`: `train()`, a Transformer trained from a `TrainConfig` into a run directory.
- `data_sources` (text or prepared data) with `tokenizer_files`, and `resume` (a run
  directory started or resumed): what `train()` reads and opens before `fit`.
- `config` (`TrainConfig`, with `config_checks`) and `presets`: the run's settings.
- `schedules`, `losses`, `metrics`: what `fit` optimizes and reports.
- `callbacks`, `backup`, `checkpoints`, `run_dir`: what a run writes, and resuming it.
- `distribute`: strategies and the global token mean of the loss.
- `prepare`: `keras-transformer prepare`, a corpus tokenized once into id shards.

The names a training script uses are importable from here, as from the one
module `keras_transformer.training` of earlier versions: `train`,
`TrainConfig`, the schedules, losses, metrics and callbacks.
"""

from keras_transformer.training.callbacks import RunHistory, TimeBudget, make_callbacks
from keras_transformer.training.config import TrainConfig, read_config_file
from keras_transformer.training.losses import MaskedLoss, masked_loss, token_losses
from keras_transformer.training.metrics import MaskedAccuracy, TargetTokens, masked_accuracy
from keras_transformer.training.run import train
from keras_transformer.training.schedules import CustomSchedule, WarmupSchedule, make_optimizer
from keras_transformer.training.tokenizer_files import build_tokenizers, learn_tokenizer_file

__all__ = [
    "CustomSchedule",
    "MaskedAccuracy",
    "MaskedLoss",
    "RunHistory",
    "TargetTokens",
    "TimeBudget",
    "TrainConfig",
    "WarmupSchedule",
    "build_tokenizers",
    "learn_tokenizer_file",
    "make_callbacks",
    "make_optimizer",
    "masked_accuracy",
    "masked_loss",
    "read_config_file",
    "token_losses",
    "train",
]
