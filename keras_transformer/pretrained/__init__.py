"""Published checkpoints imported into the library's own layers, tokenizers and run
directories: MarianMT (OPUS-MT) first (marian.py; docs/pretrained.md).

`load_marian(DIR)` returns the model and its tokenizers; `import_marian(DIR, RUN)`
writes a run directory that every command takes (`keras-transformer import-marian`).
"""

from keras_transformer.pretrained.marian import MarianModel, import_marian, load_marian
from keras_transformer.pretrained.safetensors_io import CheckpointError, read_weights

__all__ = ["CheckpointError", "MarianModel", "import_marian", "load_marian", "read_weights"]
