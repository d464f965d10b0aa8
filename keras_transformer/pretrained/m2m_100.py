"""M2M-100 and NLLB-200 checkpoints (`model_type` m2m_100) imported into the library's
Transformer and a `MultilingualTokenizer`.

transformers' `M2M100ForConditionalGeneration`: pre-LN blocks with a final layer norm
after each stack, relu (or gelu), embeddings scaled by sqrt(d_model) where
`scale_embedding`, fairseq's sinusoidal positions ("fairseq" layout, from row 2), one
vocabulary and a tied projection without bias. NLLB-200 is this model with
`NllbTokenizer` (FLORES-200 codes such as `eng_Latn`, in tokenizer.json); M2M-100 has
`M2M100Tokenizer` (vocab.json; codes such as `en`). The shared work is
`multilingual.py`.
"""

from __future__ import annotations

import os

from keras_transformer.pretrained.imported_run import PretrainedModel
from keras_transformer.pretrained.multilingual import Family, load_multilingual

FAMILY = Family(
    name="m2m_100",
    position_layout="fairseq",
    embedding_layer_norm=False,
    logits_bias=False,
)


def load(directory: str | os.PathLike) -> PretrainedModel:
    """An M2M-100 or NLLB-200 checkpoint directory (what `save_pretrained` writes, or
    `huggingface-cli download facebook/nllb-200-distilled-600M --local-dir DIR` fetches)
    as the library's Transformer and tokenizer."""
    return load_multilingual(directory, FAMILY)
