"""Text to token ids, below the model: corpora (`corpora.py`), tokenizers
(`tokenizers/`), the input pipeline of text (`data.py`, `buckets.py`) and of prepared
id shards (`prepared.py`).

Nothing here imports the model, the training run or inference. Tokenizing text
needs TensorFlow with tensorflow-text; reading prepared shards needs neither, so
this package imports nothing on its own.
"""
