"""mBART-50 checkpoints (`model_type` mbart) imported into the library's Transformer and a
`MultilingualTokenizer`.

transformers' `MBartForConditionalGeneration`: pre-LN blocks with a final layer norm
after each stack, a layer norm after the embeddings and positions
(`layernorm_embedding`), learned positions read from row 2 (fairseq's offset), gelu,
one vocabulary with a tied projection plus `final_logits_bias`; `MBart50Tokenizer`'s
codes (`en_XX`) are in tokenizer.json. The shared work is `multilingual.py`.
"""

from __future__ import annotations

import os

from keras_transformer.pretrained.imported_run import PretrainedModel
from keras_transformer.pretrained.multilingual import Family, load_multilingual

FAMILY = Family(
    name="mbart",
    position_layout="learned",
    embedding_layer_norm=True,
    logits_bias=True,
    # mBART-large-cc25's post-LN variant is a setting transformers' mBART never reads.
    refused={"add_final_layer_norm": False},
)


def load(directory: str | os.PathLike) -> PretrainedModel:
    """An mBART-50 checkpoint directory (what `save_pretrained` writes, or
    `huggingface-cli download facebook/mbart-large-50-many-to-many-mmt --local-dir DIR`
    fetches) as the library's Transformer and tokenizer."""
    return load_multilingual(directory, FAMILY)
