"""A multilingual checkpoint's tokenizer files read into the library's vocabulary and
language codes: what the M2M-100 / NLLB and mBART-50 importers share.

What transformers' `save_pretrained` writes (and the published repositories hold):
sentencepiece.bpe.model (the SentencePiece model every family tokenizes with), and
the ids of its pieces and special tokens either in tokenizer.json (NLLB, mBART-50:
the fast tokenizer's vocabulary and added tokens) or in vocab.json (M2M-100, whose
tokenizer puts its language codes after it, in a fixed order: `M2M100_LANGUAGE_CODES`).
Language codes are the added special tokens beyond `<s>`, `<pad>`, `</s>`, `<unk>` and
`<mask>`; M2M-100 writes them `__en__`, and its code is the part inside (`en`, as
transformers' `src_lang`).
Ids the files name no piece for (M2M-100's made-up words) read as special tokens.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from keras_transformer.pretrained.marian_config import read_json
from keras_transformer.pretrained.safetensors_io import CheckpointError

SENTENCEPIECE_FILE = "sentencepiece.bpe.model"
TOKENIZER_JSON = "tokenizer.json"
VOCAB_JSON = "vocab.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
BASE_SPECIAL = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
_M2M_CODE = re.compile(r"^__(.+)__$")
# M2M100Tokenizer's language codes, by its `language_codes` setting: it gives code i the
# id len(vocab.json) + i, and its files name none of them.
M2M100_LANGUAGE_CODES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv "
        "sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


@dataclasses.dataclass(frozen=True)
class TokenizerFiles:
    """The checkpoint's pieces by id, its language codes and its special ids."""

    sentencepiece_model: bytes
    pieces: list[str]  # checkpoint id -> piece (a placeholder where none is named)
    languages: dict[str, int]  # code -> checkpoint id
    special_ids: set[int]


# The tokenizers that frame a sentence `[code] pieces </s>` (source and target alike),
# by tokenizer_config.json's `tokenizer_class`: the ones this module reads.
TOKENIZER_CLASSES = (
    "NllbTokenizer",
    "NllbTokenizerFast",
    "M2M100Tokenizer",
    "MBart50Tokenizer",
    "MBart50TokenizerFast",
)
# mBART-50's codes, in MBart50Tokenizer's order: after the SentencePiece pieces (shifted
# by fairseq's offset), then `<mask>`; for a checkpoint without tokenizer.json.
MBART50_LANGUAGE_CODES = (
    "ar_AR cs_CZ de_DE en_XX es_XX et_EE fi_FI fr_XX gu_IN hi_IN it_IT ja_XX kk_KZ ko_KR lt_LT "
    "lv_LV my_MM ne_NP nl_XX ro_RO ru_RU si_LK tr_TR vi_VN zh_CN af_ZA az_AZ bn_IN fa_IR he_IL "
    "hr_HR id_ID ka_GE km_KH mk_MK ml_IN mn_MN mr_IN pl_PL ps_AF pt_XX sv_SE sw_KE ta_IN te_IN "
    "th_TH tl_XX uk_UA ur_PK xh_ZA gl_ES sl_SI"
).split()


def check_tokenizer_class(directory: Path) -> str:
    """tokenizer_config.json's `tokenizer_class`, one of `TOKENIZER_CLASSES`, in their
    default framing: another (mBART-cc25's `MBartTokenizer`, which puts the code after
    `</s>`) or NLLB's `legacy_behaviour` is refused in one line."""
    config = read_json(directory / TOKENIZER_CONFIG, "tokenizer settings")
    name = config.get("tokenizer_class") if isinstance(config, dict) else None
    if name not in TOKENIZER_CLASSES:
        raise CheckpointError(
            f"{directory / TOKENIZER_CONFIG}: tokenizer_class={name!r} is not supported "
            f"(supported: {', '.join(TOKENIZER_CLASSES)}, which put the language code first)."
        )
    if config.get("legacy_behaviour"):
        raise CheckpointError(
            f"{directory / TOKENIZER_CONFIG}: legacy_behaviour=true (the language code after "
            "</s>) is not supported."
        )
    return name


def read_tokenizer_files(directory: Path, vocab_size: int) -> TokenizerFiles:
    """Reads and checks the tokenizer files for a model of `vocab_size` ids."""
    tokenizer_class = check_tokenizer_class(directory)
    spm = directory / SENTENCEPIECE_FILE
    if not spm.is_file():
        raise CheckpointError(
            f"{spm} is missing: it holds the checkpoint's SentencePiece model "
            "(the published repositories have it)."
        )
    if (directory / TOKENIZER_JSON).is_file():
        ids, added = _from_tokenizer_json(directory / TOKENIZER_JSON)
    elif (directory / VOCAB_JSON).is_file():
        ids, added = _from_vocab_json(directory)
    elif tokenizer_class.startswith("MBart50"):
        ids, added = _from_sentencepiece(spm)
    else:
        raise CheckpointError(
            f"{directory} holds neither {TOKENIZER_JSON} nor {VOCAB_JSON}: the ids of the "
            "checkpoint's pieces are missing."
        )
    ids.update(added)
    too_big = [piece for piece, i in ids.items() if not 0 <= i < vocab_size]
    if too_big:
        raise CheckpointError(
            f"{directory}: the tokenizer's {too_big[0]!r} has id {ids[too_big[0]]}, beyond "
            f"config.json's vocab_size {vocab_size}."
        )
    pieces = [f"<unused{i}>" for i in range(vocab_size)]
    named = [False] * vocab_size
    for piece, i in ids.items():
        pieces[i], named[i] = piece, True
    for token in ("<pad>", "</s>", "<unk>"):
        if token not in ids:
            raise CheckpointError(f"{directory}: the tokenizer lacks the special token {token}.")
    languages = {}
    for token in added:
        if token in BASE_SPECIAL:
            continue
        match = _M2M_CODE.match(token)
        languages[match.group(1) if match else token] = ids[token]
    if not languages:
        raise CheckpointError(f"{directory}: the tokenizer files name no language codes.")
    special = {ids[token] for token in added} | {i for i in range(vocab_size) if not named[i]}
    return TokenizerFiles(spm.read_bytes(), pieces, languages, special)


def _from_tokenizer_json(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    value = read_json(path, "tokenizer's vocabulary")
    try:
        vocab = value["model"]["vocab"]
        if isinstance(vocab, list):  # Unigram: [piece, score] in id order
            vocab = {entry[0]: i for i, entry in enumerate(vocab)}
        added = {t["content"]: int(t["id"]) for t in value.get("added_tokens", []) if t["special"]}
    except (KeyError, TypeError, IndexError, ValueError) as error:
        raise CheckpointError(f"{path} is not a tokenizer.json of a known form: {error}") from None
    return {str(k): int(v) for k, v in vocab.items()}, added


def _from_sentencepiece(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """MBart50Tokenizer's ids from its SentencePiece model alone: fairseq's four specials,
    the pieces shifted by one (fairseq's offset), the language codes, `<mask>`."""
    import sentencepiece  # the package is a dependency; imported on this rare path

    try:
        processor = sentencepiece.SentencePieceProcessor(model_proto=path.read_bytes())
    except (OSError, RuntimeError) as error:
        raise CheckpointError(f"{path} is not a SentencePiece model: {error}") from None
    ids = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(3, processor.get_piece_size()):  # after spm's <unk>, <s>, </s>
        ids.setdefault(processor.id_to_piece(i), i + 1)
    size = processor.get_piece_size() + 1
    added = {code: size + i for i, code in enumerate(MBART50_LANGUAGE_CODES)}
    added["<mask>"] = size + len(MBART50_LANGUAGE_CODES)
    added.update({token: ids[token] for token in ("<s>", "<pad>", "</s>", "<unk>")})
    return ids, added


def _from_vocab_json(directory: Path) -> tuple[dict[str, int], dict[str, int]]:
    vocab = read_json(directory / VOCAB_JSON, "vocabulary")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise CheckpointError(f"{directory / VOCAB_JSON} must map pieces to integer ids.")
    config = read_json(directory / TOKENIZER_CONFIG, "tokenizer settings")
    if not isinstance(config, dict):
        raise CheckpointError(f"{directory / TOKENIZER_CONFIG} must hold an object.")
    kind = config.get("language_codes", "m2m100")
    if kind not in M2M100_LANGUAGE_CODES:
        raise CheckpointError(
            f"{directory / TOKENIZER_CONFIG}: language_codes={kind!r} is not known "
            f"(known: {sorted(M2M100_LANGUAGE_CODES)})."
        )
    added = {f"__{code}__": len(vocab) + i for i, code in enumerate(M2M100_LANGUAGE_CODES[kind])}
    added.update({token: vocab[token] for token in BASE_SPECIAL if token in vocab})
    return dict(vocab), added
