"""Makes the tiny random multilingual checkpoints (NLLB-200, M2M-100, mBART-50) and the
reference outputs of tests/test_pretrained_multilingual.py.

Needs torch, transformers and sentencepiece, which the library never needs: run it with
the Python of an environment that has them (the versions it was made with are written
into each reference.json):

    /path/to/refenv/bin/python tests/data/multilingual/make_fixtures.py

For each shape in `SHAPES` it writes tests/data/multilingual/<name>/: what
`save_pretrained` writes for the model and its tokenizer, plus the tokenizer's
sentencepiece.bpe.model (as the published checkpoints hold it), and reference.json /
logits.npz: transformers' outputs for `SOURCES` and `TARGETS` in several language pairs
(token ids, logits, greedy and beam generations with `forced_bos_token_id`, one target
language per row, teacher-forced log-probabilities of the labels).

Every weight is random, biases, layer norms, learned positions and the final logits
bias included (the initialization leaves those at 0 and 1, where a wrong mapping
would go unseen), then trains a few hundred steps on made-up pairs so that the models
decode varied sentences that end. The SentencePiece models are learned from a small
made-up corpus, so the fixtures need no data from outside the repository.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece
import torch
import transformers
from transformers import (
    M2M100Config,
    M2M100ForConditionalGeneration,
    M2M100Tokenizer,
    MBart50Tokenizer,
    MBartConfig,
    MBartForConditionalGeneration,
    NllbTokenizer,
)

HERE = Path(__file__).resolve().parent
SEED = 78
MAX_LENGTH = 24
NUM_BEAMS = 4

SHAPES = {
    # NLLB: M2M-100's model with NllbTokenizer; pre-LN, relu, scaled embeddings.
    "nllb_relu": dict(
        family="nllb",
        languages=("eng_Latn", "deu_Latn", "fra_Latn"),
        d_model=16,
        heads=2,
        ffn=32,
        encoder_layers=2,
        decoder_layers=2,
        activation_function="relu",
        scale_embedding=True,
    ),
    # M2M-100: its own tokenizer (vocab.json), gelu, uneven depths, unscaled embeddings.
    "m2m100_gelu": dict(
        family="m2m_100",
        languages=("en", "de", "fr"),
        d_model=24,
        heads=4,
        ffn=48,
        encoder_layers=2,
        decoder_layers=1,
        activation_function="gelu",
        scale_embedding=False,
    ),
    # mBART-50: learned positions, layernorm_embedding, a final logits bias.
    "mbart50_gelu": dict(
        family="mbart",
        languages=("en_XX", "de_DE", "fr_XX"),
        d_model=32,
        heads=4,
        ffn=64,
        encoder_layers=2,
        decoder_layers=3,
        activation_function="gelu",
        scale_embedding=True,
    ),
}


def _marian_fixtures():
    """The Marian fixtures' script, whose made-up English and German words these share."""
    spec = importlib.util.spec_from_file_location(
        "marian_fixtures", HERE.parent / "marian" / "make_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MARIAN = _marian_fixtures()
_EN, _DE = _MARIAN._EN, _MARIAN._DE
_FR = (
    "le la un deux trois petit grand rouge vert vieux neuf maison arbre rivière ville "
    "chien chat oiseau homme femme enfant voit a aime prend donne trouve près sur sous "
    "avec et mais aujourd'hui demain vite lentement très toujours jamais"
).split()
WORDS = (_EN, _DE, _FR)

SOURCES = [
    "The small dog sees a red house.",
    "Two old men take the green tree today.",
    "A child never finds the bird near the river.",
    "",
    "Very big cities always have old houses, but new trees.",
    "The cat likes the woman with the dog.",
    "Three birds over the city!",
    "Tomorrow the man gives the child a small house.",
    "1 2 3 dogs and 4 cats.",
    "The dog sees € and ✓ under the tree.",
    "   the   old   man   ",
    "Ünder the bridge, Zoë sees a cat.",
    "never",
    "Who finds the old cat?",
]
TARGETS = [
    "Der kleine Hund sieht ein rotes Haus.",
    "Le petit chien voit une maison rouge.",
    "Ein Kind findet nie den Vogel nahe dem Fluss.",
    "",
    "Sehr große Städte haben immer alte Häuser, aber neue Bäume.",
]


def corpus(seed: int, lines: int = 1500) -> list[list[str]]:
    """Made-up aligned sentences in the three languages, word for word."""
    rng = random.Random(seed)
    sides = [[], [], []]
    for _ in range(lines):
        words = [rng.randrange(len(_EN)) for _ in range(rng.randint(2, 10))]
        tail = f" {rng.randint(0, 99)}" if rng.random() < 0.3 else ""
        mark = rng.choice(".!?,;:")
        for vocabulary, side in zip(WORDS, sides):
            sentence = " ".join(vocabulary[w] for w in words) + tail
            side.append(sentence[0].upper() + sentence[1:] + mark)
    return sides


def learn_spm(texts: list[str], path: Path, vocab_size: int, model_type: str) -> None:
    """A SentencePiece model as fairseq's are laid out (<unk> 0, <s> 1, </s> 2), with the
    published models' normalization (nmt_nfkc)."""
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(path.with_suffix("")),
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        normalization_rule_name="nmt_nfkc",
        minloglevel=2,
    )
    path.with_suffix(".model").rename(path)


def make_tokenizer(shape: dict, scratch: Path, texts: list[str]):
    """The family's tokenizer on a SentencePiece model learned from `texts`."""
    spm = scratch / "sentencepiece.bpe.model"
    family = shape["family"]
    # NLLB's and M2M-100's models are BPE; mBART-50's is a unigram model (its tokenizer.json).
    learn_spm(texts, spm, 300, "unigram" if family == "mbart" else "bpe")
    if family == "m2m_100":
        processor = sentencepiece.SentencePieceProcessor(model_file=str(spm))
        # vocab.json as fairseq's dictionary: the specials, then the pieces.
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if not (processor.is_control(i) or processor.is_unknown(i)) and piece not in vocab:
                vocab[piece] = len(vocab)
        (scratch / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        return M2M100Tokenizer(str(scratch / "vocab.json"), str(spm))
    cls = NllbTokenizer if family == "nllb" else MBart50Tokenizer
    tokenizer_dir = scratch / "tokenizer"
    tokenizer_dir.mkdir()
    shutil.copy(spm, tokenizer_dir / "sentencepiece.bpe.model")
    (tokenizer_dir / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": cls.__name__})
    )
    # Made from the SentencePiece model alone, transformers 5 adds the language codes
    # only when given (the published tokenizer.json files hold them).
    codes = importlib.import_module(cls.__module__).FAIRSEQ_LANGUAGE_CODES
    return cls.from_pretrained(str(tokenizer_dir), extra_special_tokens=list(codes))


def set_languages(tokenizer, source: str, target: str) -> None:
    tokenizer.src_lang = source
    tokenizer.tgt_lang = target


def randomize(model, generator: torch.Generator) -> None:
    """Every weight random: matrices, biases, layer norms, positions, the logits bias."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "layer_norm" in name or "layernorm" in name:
                parameter.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            elif name.endswith("bias"):
                parameter.copy_(0.2 * noise)
            else:
                parameter.copy_(0.1 * noise)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.copy_(
                0.5 * torch.randn(model.final_logits_bias.shape, generator=generator)
            )


def train(model, tokenizer, shape, sides, generator, steps: int = 400) -> None:
    """A few hundred steps on made-up pairs in every direction among the languages."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    languages = shape["languages"]
    model.train()
    for _ in range(steps):
        a, b = torch.randperm(3, generator=generator)[:2].tolist()
        set_languages(tokenizer, languages[a], languages[b])
        rows = torch.randint(len(sides[0]), (32,), generator=generator).tolist()
        batch = tokenizer(
            [sides[a][i] for i in rows],
            text_target=[sides[b][i] for i in rows],
            padding=True,
            return_tensors="pt",
        )
        batch["labels"][batch["labels"] == model.config.pad_token_id] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def make_model(shape: dict, tokenizer):
    # Every id the tokenizer gives (M2M-100's language ids follow vocab.json's, and
    # its vocabulary keeps room for fairseq's made-up words after them).
    ids = [*tokenizer.get_vocab().values(), *getattr(tokenizer, "lang_code_to_id", {}).values()]
    vocab_size = max(ids) + 1 + getattr(tokenizer, "num_madeup_words", 0)
    common = dict(
        vocab_size=vocab_size,
        d_model=shape["d_model"],
        encoder_layers=shape["encoder_layers"],
        decoder_layers=shape["decoder_layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"],
        activation_function=shape["activation_function"],
        scale_embedding=shape["scale_embedding"],
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.eos_token_id,
        dropout=0.0,
        attention_dropout=0.0,
        tie_word_embeddings=True,
    )
    if shape["family"] == "mbart":
        config = MBartConfig(**common, forced_eos_token_id=tokenizer.eos_token_id)
        return MBartForConditionalGeneration(config).eval()
    return M2M100ForConditionalGeneration(M2M100Config(**common)).eval()


def generation_config(model) -> None:
    """The published checkpoints' settings: beam 4 (5 for M2M-100 and mBART-50), length
    penalty 1.0, early stopping, max_length 200 (here `MAX_LENGTH`)."""
    generation = model.generation_config
    generation.num_beams = NUM_BEAMS
    generation.max_length = MAX_LENGTH
    generation.length_penalty = 1.0
    generation.early_stopping = True


def make_checkpoint(name: str, shape: dict, directory: Path):
    sides = corpus(1)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        tokenizer = make_tokenizer(shape, scratch, [line for side in sides for line in side])
        generator = torch.Generator().manual_seed(SEED + len(name))
        model = make_model(shape, tokenizer)
        randomize(model, generator)
        train(model, tokenizer, shape, sides, generator)
        generation_config(model)
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        if not (directory / "sentencepiece.bpe.model").exists():
            shutil.copy(scratch / "sentencepiece.bpe.model", directory)


def language_id(tokenizer, code: str) -> int:
    if isinstance(tokenizer, M2M100Tokenizer):
        return tokenizer.get_lang_id(code)
    return tokenizer.convert_tokens_to_ids(code)


def references(shape: dict, directory: Path) -> tuple[dict, dict]:
    """transformers' outputs on the fixture sentences: (reference.json, logits.npz)."""
    family = shape["family"]
    cls = {"nllb": NllbTokenizer, "m2m_100": M2M100Tokenizer, "mbart": MBart50Tokenizer}[family]
    tokenizer = cls.from_pretrained(directory)
    model_cls = (
        MBartForConditionalGeneration if family == "mbart" else M2M100ForConditionalGeneration
    )
    model = model_cls.from_pretrained(directory).eval()
    languages = shape["languages"]
    # Row i translates from languages[i % 3] into languages[(i + 1) % 3]: mixed targets.
    pairs = [(languages[i % 3], languages[(i + 1) % 3]) for i in range(len(SOURCES))]
    source_ids = []
    for text, (source, target) in zip(SOURCES, pairs):
        set_languages(tokenizer, source, target)
        source_ids.append(tokenizer(text).input_ids)
    target_ids = []
    for text, (_, target) in zip(TARGETS, pairs):
        set_languages(tokenizer, target, target)
        target_ids.append(tokenizer(text_target=text).input_ids)
    forced = [language_id(tokenizer, target) for _, target in pairs]
    reference = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "max_length": MAX_LENGTH,
        "languages": list(languages),
        "language_ids": {code: language_id(tokenizer, code) for code in languages},
        "pairs": pairs,
        "sources": SOURCES,
        "targets": TARGETS,
        "source_ids": source_ids,
        "target_ids": target_ids,
        "target_decoded": [tokenizer.decode(ids, skip_special_tokens=True) for ids in target_ids],
        "vocab_size": model.config.vocab_size,
        "generation": model.generation_config.to_diff_dict(),
    }
    arrays = {}
    log_probs = []
    start = model.config.decoder_start_token_id
    with torch.no_grad():
        for i, (src, tgt) in enumerate(zip(source_ids, target_ids)):
            decoder_in = [start] + tgt[:-1]
            logits = model(
                input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([decoder_in])
            ).logits[0]
            if i < 3:
                arrays[f"logits_{i}"] = logits.numpy().astype(np.float32)
            per_token = torch.log_softmax(logits, -1)[torch.arange(len(tgt)), torch.tensor(tgt)]
            log_probs.append(per_token.tolist())
        reference["teacher_forced_log_probs"] = log_probs
        for key, settings in (
            ("greedy", dict(num_beams=1)),
            ("beam", dict()),  # the checkpoint's generation_config
        ):
            rows, scores = [], []
            for src, bos in zip(source_ids, forced):
                out = model.generate(
                    torch.tensor([src]),
                    forced_bos_token_id=bos,
                    do_sample=False,
                    output_scores=True,
                    return_dict_in_generate=True,
                    **settings,
                )
                ids = out.sequences[0].tolist()[1:]  # after the decoder start
                rows.append([t for t in ids if t != model.config.pad_token_id])
                if key == "beam":
                    scores.append(float(out.sequences_scores[0]))
            reference[key] = rows
            reference[f"{key}_decoded"] = [
                tokenizer.decode(ids, skip_special_tokens=True) for ids in rows
            ]
            if scores:
                reference[f"{key}_scores"] = scores
        # Greedy over the whole batch at once, each row in its own languages: the
        # sources padded, the target's code given after the decoder's start.
        width = max(len(ids) for ids in source_ids)
        pad = model.config.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in source_ids])
        out = model.generate(
            input_ids=input_ids,
            attention_mask=(input_ids != pad).long(),
            num_beams=1,
            do_sample=False,
            decoder_input_ids=torch.tensor([[start, bos] for bos in forced]),
        )
        reference["greedy_batch_forced"] = [
            [t for t in row.tolist()[1:] if t != pad] for row in out
        ]
    return reference, arrays


def main() -> None:
    for name, shape in SHAPES.items():
        directory = HERE / name
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir()
        make_checkpoint(name, shape, directory)
        reference, arrays = references(shape, directory)
        (directory / "reference.json").write_text(
            json.dumps(reference, ensure_ascii=False, indent=1) + "\n"
        )
        np.savez_compressed(directory / "logits.npz", **arrays)
        size = sum(f.stat().st_size for f in directory.iterdir())
        print(f"{name}: {size / 1024:.0f} kB", sorted(p.name for p in directory.iterdir()))


if __name__ == "__main__":
    main()
