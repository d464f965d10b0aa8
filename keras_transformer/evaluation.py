"""Translation quality with sacrebleu: BLEU and chrF on a test set.

Pre-tokenized, lowercased corpora (TED pt-en as released, Multi30k tok/) must be
scored with `tokenize="none"`: re-tokenizing already tokenized text inflates
BLEU. Raw text uses sacrebleu's default ("13a"). To compare raw output with a
reference that was lowercased and Moses-tokenized (Multi30k tok/), put the output
into the same form with `moses_form` and score with `tokenize="none"`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesPunctNormalizer, MosesTokenizer
from sacremoses.corpus import NonbreakingPrefixes
from tqdm.auto import tqdm

from keras_transformer.inference.loaded_export import (
    checked_languages,
    load_translator,
    row_search,
    translate_texts,
)
from keras_transformer.text import corpora

DEFAULT_TOKENIZE = "13a"


# The fields `evaluate` writes itself: `score`'s and where the translations went. A
# caller's metadata may not take their names (tests hold this list to `score`'s keys).
RESULT_FIELDS = (
    "bleu",
    "chrf",
    "bleu_signature",
    "chrf_signature",
    "bleu_detail",
    "sentences",
    "translations_file",
)


def score(
    hypotheses: Sequence[str],
    references: Sequence[str],
    tokenize: str = DEFAULT_TOKENIZE,
    lowercase: bool = False,
) -> dict:
    """Corpus BLEU and chrF of `hypotheses` against one reference each.

    Returns:
        dict with "bleu", "chrf", their sacrebleu signatures, and "sentences".
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: "
            "every hypothesis needs exactly one reference."
        )
    bleu = BLEU(tokenize=tokenize, lowercase=lowercase)
    chrf = CHRF(lowercase=lowercase)
    refs = [list(references)]
    bleu_score = bleu.corpus_score(list(hypotheses), refs)
    chrf_score = chrf.corpus_score(list(hypotheses), refs)
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "bleu_detail": str(bleu_score),
        "sentences": len(hypotheses),
    }


def moses_form(lines: Sequence[str], lang: str, lowercase: bool = True) -> list[str]:
    """`lines` as the Moses pipeline of published corpora writes them: lowercased (by
    default), punctuation-normalized and tokenized with sacremoses for language `lang`,
    quotes and apostrophes escaped (`&quot;`, `&apos;`). Scoring such lines needs
    `tokenize="none"`."""
    check_moses_lang(lang)
    normalizer = MosesPunctNormalizer(lang=lang)
    tokenizer = MosesTokenizer(lang=lang)
    return [
        tokenizer.tokenize(
            normalizer.normalize(line.lower() if lowercase else line), return_str=True, escape=True
        )
        for line in lines
    ]


def check_moses_lang(lang: str) -> None:
    """sacremoses takes English's rules, silently, for a language it has none for (such
    as a misspelt code): such a code is refused instead ("en" asks for English's)."""
    known = sorted(set(NonbreakingPrefixes().available_langs.values()))
    if lang not in known:
        raise ValueError(
            f"sacremoses has no Moses rules for language {lang!r}. Known: {', '.join(known)} "
            "(en for English's rules)."
        )


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file, without line ends (undecodable bytes are an error),
    split as `corpora.split_lines` splits them."""
    with open(path, "rb") as f:
        lines = corpora.split_lines(f.read())
    try:
        return [line.decode("utf-8") for line in lines]
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not valid UTF-8: {error}") from error


def saved_model_translate_fn(
    model_path: str | os.PathLike,
    beam_width: int | None = None,
    source_language: str | None = None,
    target_language: str | None = None,
) -> Callable[[list[str]], list[str]]:
    """A function translating a list of strings with an exported SavedModel.

    Greedy search through `serving_default`, or beam search of `beam_width`; an export
    without it is refused here, before anything is translated, and so is a multilingual
    export without both languages (or a single-pair one given them).
    """
    saved_model = load_translator(model_path)
    row_search(saved_model, beam_width)
    languages = checked_languages(saved_model, source_language, target_language)

    def translate(batch: list[str]) -> list[str]:
        rows = translate_texts(saved_model, batch, beam_width, len(batch), languages)
        return [text for text, _ in rows]

    return translate


def evaluate(
    translate: Callable[[list[str]], list[str]] | str | os.PathLike,
    sources: Sequence[str] | str | os.PathLike,
    references: Sequence[str] | str | os.PathLike,
    tokenize: str = DEFAULT_TOKENIZE,
    lowercase: bool = False,
    batch_size: int = 64,
    output_dir: str | os.PathLike | None = None,
    beam_width: int | None = None,
    progress: bool = True,
    moses_lang: str | None = None,
    metadata: dict | None = None,
    source_language: str | None = None,
    target_language: str | None = None,
) -> dict:
    """Translates `sources` and scores the result against `references`.

    Args:
        translate: a function from a list of strings to their translations, or
            the path of an exported SavedModel (TF Serving layout).
        sources, references: lists of sentences, or paths of line-aligned files.
        tokenize: sacrebleu tokenizer; "none" for pre-tokenized corpora.
        output_dir: if given, writes translations.txt and scores.json there.
        beam_width: beam search of this width when `translate` is a path;
            greedy search when None.
        moses_lang: score the translations in Moses form for this language
            (`moses_form`: lowercased, punctuation-normalized, tokenized), for
            references made that way; needs `tokenize="none"`. translations.txt
            keeps them as the model wrote them.
        source_language, target_language: a multilingual export's languages, when
            `translate` is a path (both needed there; none for a single-pair export).
        metadata: fields recorded beside the scores (in the result and in
            scores.json), such as the model and the search, so that a
            scores.json says what produced it. JSON-serializable, and none of
            `RESULT_FIELDS`.

    Returns:
        the dict of `score`, plus `metadata` and where the outputs were written.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = read_lines(sources)
    if isinstance(references, (str, os.PathLike)):
        references = read_lines(references)
    if len(sources) != len(references):
        raise ValueError(
            f"The source has {len(sources)} lines but the reference has {len(references)}: "
            "they must be line-aligned."
        )
    if not sources:
        raise ValueError("The source has no lines: there is nothing to translate and score.")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive. Received: batch_size={batch_size}")
    if moses_lang and tokenize != "none":
        raise ValueError(
            f"Translations in Moses form are tokenized already: score them with "
            f'tokenize="none". Received: tokenize={tokenize!r}'
        )
    if moses_lang:
        check_moses_lang(moses_lang)
    metadata = dict(metadata or {})
    taken = sorted(set(metadata) & set(RESULT_FIELDS))
    if taken:
        raise ValueError(f"metadata may not replace the scores' own fields: {taken}.")
    try:
        json.dumps(metadata)
    except TypeError as error:  # before translating, not after
        raise ValueError(f"metadata must be JSON-serializable: {error}") from None
    if not callable(translate):  # an export that cannot translate is refused before the mkdir
        translate = saved_model_translate_fn(
            translate, beam_width, source_language, target_language
        )
    if output_dir is not None:
        # Made before translating: a path that cannot be a directory fails now, not
        # after the whole set is translated.
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)

    hypotheses: list[str] = []
    with tqdm(total=len(sources), desc="translating", unit="sent", disable=not progress) as bar:
        for start in range(0, len(sources), batch_size):
            batch = list(sources[start : start + batch_size])
            hypotheses.extend(translate(batch))
            bar.update(len(batch))
    scored = moses_form(hypotheses, moses_lang) if moses_lang else hypotheses
    result = score(scored, references, tokenize=tokenize, lowercase=lowercase)
    result.update(metadata)
    if output_dir is not None:
        (output_dir / "translations.txt").write_text(
            "".join(h + "\n" for h in hypotheses), encoding="utf-8"
        )
        result["translations_file"] = str(output_dir / "translations.txt")
        (output_dir / "scores.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def summary_line(result: dict) -> str:
    """One human-readable line: BLEU, chrF and the BLEU signature."""
    return (
        f"BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  "
        f"({result['sentences']} sentences; {result['bleu_signature']})"
    )
