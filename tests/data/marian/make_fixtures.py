"""Makes the tiny random MarianMT checkpoints and reference outputs of tests/test_pretrained.py.

Needs torch, transformers and sentencepiece, which the library never needs: run it with
the Python of an environment that has them (the versions it was made with are written
into each reference.json):

    /path/to/refenv/bin/python tests/data/marian/make_fixtures.py

For each shape in `SHAPES` it writes tests/data/marian/<name>/: what `save_pretrained`
writes for a `MarianMTModel` and its `MarianTokenizer` (config.json, model.safetensors,
source.spm, target.spm, vocab.json and target_vocab.json where the vocabularies are
separate, tokenizer_config.json, special_tokens_map.json, generation_config.json), and
reference.json / logits.npz: transformers' outputs for `SOURCES` and `TARGETS` (token
ids, logits, greedy and beam-4 generations, teacher-forced log-probabilities).

Every weight starts random, biases, layer norms and the final logits bias included (the
initialization leaves those at 0 and 1, where a wrong mapping would go unseen), then
trains 500 steps on made-up word-for-word pairs, so that the models decode
varied sentences of their own lengths (an untrained one repeats a token to the cap); the
SentencePiece models are learned from a small made-up corpus (`corpus`), so the
fixtures need no data from outside the repository.

With `--references-only` it trains and writes nothing but reference.json: it loads each
checkpoint as committed and adds, beside the references above, transformers' outputs
under generation settings of released checkpoints (`transformers_references`: beam
search with length normalization and early stopping, a forced first token), made with
the transformers named under those keys. The weights stay as they are, so the
references already there still hold.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece
import torch
import transformers
from transformers import MarianConfig, MarianMTModel, MarianTokenizer

HERE = Path(__file__).resolve().parent
SEED = 60

# name -> the checkpoint's shape. Uneven depths, every activation Marian names, joint and
# separate vocabularies (untied output projection), both embedding scales.
SHAPES = {
    "joint_swish": dict(
        d_model=16,
        heads=2,
        ffn=32,
        encoder_layers=2,
        decoder_layers=1,
        activation_function="swish",
        scale_embedding=True,
        separate=False,
        tie_word_embeddings=True,
        normalization="nmt_nfkc",  # OPUS-MT's SentencePiece normalization
        language_codes=(">>fra<<", ">>deu<<"),
    ),
    "separate_gelu": dict(
        d_model=24,
        heads=4,
        ffn=48,
        encoder_layers=1,
        decoder_layers=2,
        activation_function="gelu",
        scale_embedding=False,
        separate=True,
        # transformers 4.57 ties an output projection to the encoder's (source)
        # embedding when the vocabularies are separate: such checkpoints come untied.
        tie_word_embeddings=False,
        normalization="identity",  # the fixtures stay small: no charsmap
        language_codes=(),
    ),
    "joint_relu": dict(
        d_model=32,
        heads=4,
        ffn=64,
        encoder_layers=2,
        decoder_layers=3,
        activation_function="relu",
        scale_embedding=True,
        separate=False,
        tie_word_embeddings=True,
        normalization="identity",
        language_codes=(),
    ),
}

# Decoding settings of the references: no length normalization (the library's beam
# search with length_penalty_alpha 0 ranks alike) and a cap of MAX_LENGTH positions,
# the decoder's start included.
MAX_LENGTH = 24
NUM_BEAMS = 4

_EN = (
    "the a one two three small big red green old new house tree river city dog cat bird "
    "man woman child sees has likes takes gives finds near over under with and but "
    "today tomorrow quickly slowly very always never"
).split()
_DE = (
    "der die das ein eine zwei drei klein groß rot grün alt neu Haus Baum Fluss Stadt "
    "Hund Katze Vogel Mann Frau Kind sieht hat mag nimmt gibt findet nahe über unter mit "
    "und aber heute morgen schnell langsam sehr immer nie"
).split()

SOURCES = [
    "The small dog sees a red house.",
    "Two old men take the green tree today.",
    "A child never finds the bird near the river.",
    "",
    "Very big cities always have old houses, but new trees.",
    "The cat likes the woman with the dog.",
    "Three birds over the city!",
    "Tomorrow the man gives the child a small house.",
    "Quickly, slowly: the river takes the tree.",
    "1 2 3 dogs and 4 cats.",
    "The dog sees € and ✓ under the tree.",
    "   the   old   man   ",
    "Ünder the bridge, Zoë sees a cat.",
    "A woman and a man and a child and a dog.",
    "never",
    "The green bird likes the red bird.",
    "Big dogs, small cats.",
    "The new city has a river.",
    "Who finds the old cat?",
    "The house is very old and very big.",
]
TARGETS = [
    "Der kleine Hund sieht ein rotes Haus.",
    "Zwei alte Männer nehmen heute den grünen Baum.",
    "Ein Kind findet nie den Vogel nahe dem Fluss.",
    "",
    "Sehr große Städte haben immer alte Häuser, aber neue Bäume.",
    "Die Katze mag die Frau mit dem Hund.",
]
# Sources a multilingual checkpoint reads: the target language's token kept whole.
CODED_SOURCES = [
    ">>fra<< The small dog sees a red house.",
    ">>deu<< Two old men.",
    ">>xyz<< An unknown code.",
    ">>fra<<",
]


def corpus(seed: int, lines: int = 1500) -> tuple[list[str], list[str]]:
    """Made-up aligned pairs, word for word, with capitals, digits and punctuation."""
    rng = random.Random(seed)
    sources, targets = [], []
    for _ in range(lines):
        words = [rng.randrange(len(_EN)) for _ in range(rng.randint(2, 10))]
        tail = f" {rng.randint(0, 99)}" if rng.random() < 0.3 else ""
        mark = rng.choice(".!?,;:")
        for vocabulary, side in ((_EN, sources), (_DE, targets)):
            sentence = " ".join(vocabulary[w] for w in words) + tail
            side.append(sentence[0].upper() + sentence[1:] + mark)
    return sources, targets


def learn_spm(texts: list[str], path: Path, vocab_size: int, normalization: str) -> None:
    """A SentencePiece model as Marian's are laid out: <unk> 0, <s> 1, </s> 2."""
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(path.with_suffix("")),
        vocab_size=vocab_size,
        character_coverage=1.0,
        normalization_rule_name=normalization,
        minloglevel=2,
    )
    path.with_suffix(".model").rename(path)


def spm_pieces(path: Path) -> list[str]:
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]


def marian_vocab(*piece_lists, extra=()) -> dict[str, int]:
    """vocab.json as Marian writes it: </s> 0, <unk> 1, the pieces, <pad> last."""
    tokens = ["</s>", "<unk>", *extra]
    for pieces in piece_lists:
        tokens += [piece for piece in pieces if piece not in tokens]
    tokens.append("<pad>")
    return {token: i for i, token in enumerate(tokens)}


def randomize(model: MarianMTModel, generator: torch.Generator) -> None:
    """Every weight random: matrices, biases, layer norms, the final logits bias."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name:
                continue  # sinusoidal, fixed: part of the architecture
            noise = torch.randn(parameter.shape, generator=generator)
            if "layer_norm" in name and name.endswith("weight"):
                parameter.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                parameter.copy_(0.2 * noise)
            else:
                parameter.copy_(0.1 * noise)
        bias = torch.randn(model.final_logits_bias.shape, generator=generator)
        bias[0, model.config.eos_token_id] += 2.0  # so that rows end before the cap
        model.final_logits_bias.copy_(bias)


def train(model, tokenizer, sources, targets, generator, steps: int = 500) -> None:
    """A few hundred steps on the made-up pairs, from the random weights: a model that
    decodes varied sentences that end, where an untrained one repeats a token to the cap."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(sources), (32,), generator=generator).tolist()
        batch = tokenizer(
            [sources[i] for i in rows],
            text_target=[targets[i] for i in rows],
            padding=True,
            return_tensors="pt",
        )
        batch["labels"][batch["labels"] == model.config.pad_token_id] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def make_checkpoint(name: str, shape: dict, directory: Path) -> None:
    source_texts, target_texts = corpus(1)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        # Separate vocabularies of one size: transformers' Marian takes one pad id for
        # both embeddings, and its beam search reshapes by the source's vocabulary size.
        learn_spm(source_texts, scratch / "source.spm", 200, shape["normalization"])
        learn_spm(target_texts, scratch / "target.spm", 200, shape["normalization"])
        codes = shape["language_codes"]
        if shape["separate"]:
            vocab = marian_vocab(spm_pieces(scratch / "source.spm"))
            target_vocab = marian_vocab(spm_pieces(scratch / "target.spm"))
        else:
            vocab = marian_vocab(
                spm_pieces(scratch / "source.spm"), spm_pieces(scratch / "target.spm"), extra=codes
            )
            target_vocab = None
        (scratch / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        arguments = dict(separate_vocabs=shape["separate"])
        if target_vocab is not None:
            (scratch / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False))
            arguments["target_vocab_file"] = str(scratch / "target_vocab.json")
        tokenizer = MarianTokenizer(
            str(scratch / "source.spm"),
            str(scratch / "target.spm"),
            str(scratch / "vocab.json"),
            **arguments,
        )
    target_size = len(target_vocab or vocab)
    pad = target_size - 1
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=target_size,
        share_encoder_decoder_embeddings=not shape["separate"],
        tie_word_embeddings=shape["tie_word_embeddings"],
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
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        bad_words_ids=[[pad]],
        num_beams=NUM_BEAMS,
        max_length=MAX_LENGTH,
        length_penalty=0.0,
    )
    generator = torch.Generator().manual_seed(SEED + len(name))
    model = MarianMTModel(config).eval()
    randomize(model, generator)
    train(model, tokenizer, source_texts, target_texts, generator)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def references(directory: Path, coded: bool) -> tuple[dict, dict]:
    """transformers' outputs on the fixture sentences: (reference.json, logits.npz)."""
    tokenizer = MarianTokenizer.from_pretrained(directory)
    model = MarianMTModel.from_pretrained(directory).eval()
    pad = model.config.pad_token_id
    sources = SOURCES + (CODED_SOURCES if coded else [])
    source_ids = [tokenizer(text).input_ids for text in sources]
    target_ids = [tokenizer(text_target=text).input_ids for text in TARGETS]
    reference = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "max_length": MAX_LENGTH,
        "sources": sources,
        "targets": TARGETS,
        "source_ids": source_ids,
        "target_ids": target_ids,
        "target_decoded": [tokenizer.decode(ids, skip_special_tokens=True) for ids in target_ids],
    }
    arrays = {}
    log_probs = []
    with torch.no_grad():
        for i, (src, tgt) in enumerate(zip(source_ids, target_ids)):
            decoder_in = [model.config.decoder_start_token_id] + tgt[:-1]
            logits = model(
                input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([decoder_in])
            ).logits[0]
            if i < 3:
                arrays[f"logits_{i}"] = logits.numpy().astype(np.float32)
            # As generate sees them: the pad id suppressed (bad_words_ids).
            logits[:, pad] = -float("inf")
            per_token = torch.log_softmax(logits, -1)[torch.arange(len(tgt)), torch.tensor(tgt)]
            log_probs.append(per_token.tolist())
        reference["teacher_forced_log_probs"] = log_probs
    for beams, key in ((1, "greedy"), (NUM_BEAMS, "beam")):
        hypotheses, scores = _generate(
            model, source_ids, num_beams=beams, length_penalty=0.0, early_stopping=False
        )
        rows = [best for best, *_ in hypotheses]
        scores = [best for best, *_ in scores]
        reference[key] = rows
        reference[f"{key}_decoded"] = [
            tokenizer.decode(ids, skip_special_tokens=True) for ids in rows
        ]
        if scores:
            reference[f"{key}_scores"] = scores
    return reference, arrays


# transformers' beam settings of the added references: OPUS-MT's generation_config.json
# (num_beams 4, length_penalty 1.0, early_stopping true), and the same with the other
# two stopping rules.
EARLY_STOPPING = {"true": True, "false": False, "never": "never"}
# The fixtures' models are sure of their tokens, so the three stopping rules seldom part;
# with the output projection scaled by this (logits bias included; where the projection
# is tied, the embeddings with it) the models are less sure, and the rules part on many rows.
FLAT_SCALE = 0.25


def _generate(model, source_ids, **settings) -> tuple[list, list]:
    """generate() on each row alone, with the checkpoint's generation config and
    `settings`: each row's hypotheses (all `num_return_sequences` of them, best first,
    after the decoder start, without padding) and their `sequences_scores`."""
    pad = model.config.pad_token_id
    rows, scores = [], []
    with torch.no_grad():
        for src in source_ids:
            out = model.generate(
                torch.tensor([src]),
                do_sample=False,
                max_length=MAX_LENGTH,
                output_scores=True,
                return_dict_in_generate=True,
                **settings,
            )
            rows.append([[t for t in seq[1:] if t != pad] for seq in out.sequences.tolist()])
            if getattr(out, "sequences_scores", None) is not None:  # beam search only
                scores.append([float(s) for s in out.sequences_scores])
    return rows, scores


def flattened(model: MarianMTModel, scale: float) -> list[str]:
    """Scales `model`'s output projection and logits bias by `scale`, in place, and
    returns the names of the parameters scaled: the projection's and those tied to it."""
    projection = model.lm_head.weight
    with torch.no_grad():
        projection.mul_(scale)
        model.final_logits_bias.mul_(scale)
    tied = [
        name
        for name, parameter in model.named_parameters(remove_duplicate=False)
        if parameter.data_ptr() == projection.data_ptr()
    ]
    return [*tied, "final_logits_bias"]


def forced_first_ids(reference: dict) -> list[int]:
    """An ordinary target id per source row, to force as its first token: taken in turn
    from the reference targets' ids (never </s>, <unk> or padding)."""
    pool = [t for ids in reference["target_ids"] for t in ids if t > 1]
    return [pool[(7 * row) % len(pool)] for row in range(len(reference["source_ids"]))]


def _beams(model, source_ids, versions: dict, **extra) -> dict:
    """Beam 4, length_penalty 1.0, for each of the `EARLY_STOPPING` rules: every row's
    4 best hypotheses (`num_return_sequences`) and their scores."""
    added = {}
    for key, early_stopping in EARLY_STOPPING.items():
        settings = dict(
            num_beams=NUM_BEAMS,
            length_penalty=1.0,
            early_stopping=early_stopping,
            num_return_sequences=NUM_BEAMS,
        )
        rows, scores = _generate(model, source_ids, **settings)
        added[key] = {
            "versions": versions,
            "settings": settings,
            **extra,
            "nbest": rows,
            "nbest_scores": scores,
        }
    return added


def transformers_references(directory: Path, reference: dict) -> dict:
    """reference.json's keys of transformers' beam search with length normalization and
    each early stopping rule (of the checkpoint, and of it made less sure: `FLAT_SCALE`),
    and of a forced first token (greedy, and beam search as OPUS-MT's settings)."""
    model = MarianMTModel.from_pretrained(directory).eval()
    source_ids = reference["source_ids"]
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    added = {
        f"beam_early_stopping_{key}": value
        for key, value in _beams(model, source_ids, versions).items()
    }
    forced = forced_first_ids(reference)
    greedy, beam, beam_scores = [], [], []
    settings = {"num_beams": NUM_BEAMS, "length_penalty": 1.0, "early_stopping": True}
    for src, first in zip(source_ids, forced):
        (row,), _ = _generate(model, [src], num_beams=1, forced_bos_token_id=first)
        greedy.append(row[0])
        (row,), (score,) = _generate(model, [src], forced_bos_token_id=first, **settings)
        beam.append(row[0])
        beam_scores.append(score[0])
    added["forced_first"] = {
        "versions": versions,
        "settings": settings,
        "ids": forced,
        "greedy": greedy,
        "beam": beam,
        "beam_scores": beam_scores,
    }
    scaled = flattened(model, FLAT_SCALE)
    flat = _beams(model, source_ids, versions, output_scale=FLAT_SCALE, scaled=scaled)
    added |= {f"flat_beam_early_stopping_{key}": value for key, value in flat.items()}
    return added


def add_references() -> None:
    """`--references-only`: each committed checkpoint's reference.json with
    `transformers_references` added (or made again); nothing else is written."""
    for name in SHAPES:
        path = HERE / name / "reference.json"
        reference = json.loads(path.read_text())
        reference.update(transformers_references(HERE / name, reference))
        path.write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")
        print(f"{name}: references added")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--references-only",
        action="store_true",
        help="add transformers' references to the committed checkpoints' reference.json",
    )
    if parser.parse_args().references_only:
        add_references()
        return
    for name, shape in SHAPES.items():
        directory = HERE / name
        directory.mkdir(exist_ok=True)
        for old in directory.iterdir():
            old.unlink()
        make_checkpoint(name, shape, directory)
        reference, arrays = references(directory, coded=bool(shape["language_codes"]))
        reference.update(transformers_references(directory, reference))
        (directory / "reference.json").write_text(
            json.dumps(reference, ensure_ascii=False, indent=1) + "\n"
        )
        np.savez_compressed(directory / "logits.npz", **arrays)
        size = sum(f.stat().st_size for f in directory.iterdir())
        print(f"{name}: {size / 1024:.0f} kB")


if __name__ == "__main__":
    main()
