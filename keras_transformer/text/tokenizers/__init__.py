"""Tokenizers: strings <-> token ids, exportable inside a SavedModel.

Two kinds, with one interface (`tokenize`, `detokenize`, `lookup`,
`vocab_size`, `get_vocab_size`, `get_vocab`):

- `SentencePieceTokenizer` (the default of a training run): reversible
  subwords, cased, `detokenize(tokenize(x)) == normalize(x)`.
- `Tokenizer` (alias `WordPieceTokenizer`): the TensorFlow tutorial's
  WordPiece, which sets punctuation off by spaces and usually lowercases.
- `MarianTokenizer`: an imported Marian (OPUS-MT) checkpoint's, never learned
  here (`keras_transformer.pretrained`).
- `MultilingualTokenizer`: an imported NLLB-200, M2M-100 or mBART-50 checkpoint's,
  a language code per row.

Both reserve the same ids: [PAD]=0, [UNK]=1, [START]=2, [END]=3.
"""

from keras_transformer.constants import (
    END,
    END_ID,
    PAD,
    PAD_ID,
    RESERVED_TOKENS,
    START,
    START_ID,
    UNK,
    UNK_ID,
)
from keras_transformer.text.tokenizers.settings import (
    NORMALIZATION_FORMS,
    SUBWORD_MODELS,
    check_normalization_form,
)

try:
    import tensorflow_text
except ImportError:  # prepared data trains without it; the tokenizers need it
    tensorflow_text = None

if tensorflow_text is not None:
    from keras_transformer.text.tokenizers.marian import (
        MarianTokenizer,
        read_marian_tokenizer,
        write_marian_tokenizer,
    )
    from keras_transformer.text.tokenizers.multilingual import MultilingualTokenizer
    from keras_transformer.text.tokenizers.normalization import normalize_text
    from keras_transformer.text.tokenizers.sentencepiece import (
        SentencePieceTokenizer,
        learn_sentencepiece_model,
        read_sentencepiece_model,
        write_sentencepiece_model,
    )
    from keras_transformer.text.tokenizers.wordpiece import (
        Tokenizer,
        WordPieceTokenizer,
        learn_vocabulary,
        read_vocabulary,
        write_vocabulary,
    )

    # config.json's tokenizer "kind" -> the class that reads it.
    TOKENIZER_KINDS = {
        SentencePieceTokenizer.kind: SentencePieceTokenizer,
        WordPieceTokenizer.kind: WordPieceTokenizer,
        MarianTokenizer.kind: MarianTokenizer,
        MultilingualTokenizer.kind: MultilingualTokenizer,
    }


__all__ = [
    "END",
    "END_ID",
    "MarianTokenizer",
    "MultilingualTokenizer",
    "NORMALIZATION_FORMS",
    "PAD",
    "PAD_ID",
    "RESERVED_TOKENS",
    "START",
    "START_ID",
    "SUBWORD_MODELS",
    "TOKENIZER_KINDS",
    "UNK",
    "UNK_ID",
    "SentencePieceTokenizer",
    "Tokenizer",
    "WordPieceTokenizer",
    "check_normalization_form",
    "learn_sentencepiece_model",
    "learn_vocabulary",
    "normalize_text",
    "read_marian_tokenizer",
    "read_sentencepiece_model",
    "read_vocabulary",
    "write_marian_tokenizer",
    "write_sentencepiece_model",
    "write_vocabulary",
]


def __getattr__(name: str):
    if name in __all__ and tensorflow_text is None:
        raise ImportError(
            f"keras_transformer.text.tokenizers.{name} needs TensorFlow and tensorflow-text, "
            "which are not installed here (pip install tensorflow tensorflow-text); "
            "training from prepared data needs neither.",
            name="tensorflow_text",
        )
    raise AttributeError(f"module 'keras_transformer.text.tokenizers' has no attribute {name!r}")
