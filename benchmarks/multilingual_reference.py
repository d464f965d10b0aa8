"""A random checkpoint of NLLB-200-distilled-600M's shape, and CTranslate2's conversion of it.

The reference half of benchmarks/multilingual.py, run by the Python of an environment that
has torch, transformers, sentencepiece and ctranslate2 (the library never needs them):

    refenv/bin/pip install "ctranslate2>=4.5,<5"
    refenv/bin/python benchmarks/multilingual_reference.py OUT --max-length 32

It writes, under OUT:

- checkpoint/: what `save_pretrained` writes for `M2M100ForConditionalGeneration` at
  facebook/nllb-200-distilled-600M's shape (12+12 pre-LN layers, d_model 1024, 16 heads,
  feed-forward 4096, relu, scaled embeddings, sinusoidal positions up to 1,024, one
  vocabulary of 256,206 ids shared by both embeddings and the output projection, `<pad>` 1,
  `</s>` 2 and the decoder's start 2; 615M parameters, a model.safetensors of 2.46 GB),
  drawn by transformers' own initialisation (seeded) with a standard deviation of 0.05
  rather than the config's 0.02 (at 0.02 every sentence's greedy output is the target
  language's code repeated; at 0.05 each sentence repeats its own token, so that the check
  of equal outputs is not empty: as benchmarks/marian_reference.py), and the tokenizer files of the
  tests' tiny NLLB fixture (tests/data/multilingual/nllb_relu: a 300-piece SentencePiece
  model and the 202 language codes; the ids they leave unnamed import as unused special
  rows). The row of `</s>` in the shared embedding is zero, so its logit is 0 where the
  largest of the 256,206 random logits is about 3: no row ever ends early, and every
  implementation decodes exactly as many steps as its length cap allows, as the published
  checkpoint would on sentences longer than the cap;
- ctranslate2/: the checkpoint converted by CTranslate2's own converter
  (`ct2-transformers-converter --model checkpoint --output_dir ctranslate2`, float32);
- reference.json: the sentences (held-in English lines of the fixtures' made-up corpus,
  `make_fixtures.corpus`, which the SentencePiece model learned from), their source
  tokens as CTranslate2 takes them for NLLB (`eng_Latn`, the SentencePiece pieces,
  `</s>`; checked equal to NllbTokenizer's), CTranslate2's greedy translations into
  `deu_Latn` (`target_prefix`) as the checkpoint's ids (nearly all of what a random model
  of this vocabulary picks are ids the small tokenizer names no piece for, which no text
  shows), the versions, the build and conversion times, and the check of the conversion against
  transformers on the first `--check` sentences: transformers' `generate(num_beams=1,
  forced_bos_token_id=deu_Latn)` tokens against CTranslate2's, and the log-probabilities
  of CTranslate2's outputs under both (it stops if they differ by more than 1e-2: the
  converter does not fit this transformers version). Equal tokens are counted, not
  required: with 256,206 random logits a step's best and runner-up can lie within float
  error of each other.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "multilingual" / "nllb_relu"
TOKENIZER_FILES = ("sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json")

# facebook/nllb-200-distilled-600M's config.json, as transformers' M2M100Config takes it.
NLLB_600M = dict(
    vocab_size=256206,
    max_position_embeddings=1024,
    encoder_layers=12,
    decoder_layers=12,
    encoder_attention_heads=16,
    decoder_attention_heads=16,
    encoder_ffn_dim=4096,
    decoder_ffn_dim=4096,
    d_model=1024,
    activation_function="relu",
    scale_embedding=True,
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.0,
    encoder_layerdrop=0,
    decoder_layerdrop=0,
    init_std=0.02,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    tie_word_embeddings=True,
    architectures=["M2M100ForConditionalGeneration"],
)
SOURCE_LANGUAGE, TARGET_LANGUAGE = "eng_Latn", "deu_Latn"
SCORE_TOLERANCE = 1e-2  # log-probabilities of the same tokens under transformers and CTranslate2
INIT_STD = 0.05  # the random weights' standard deviation (build_checkpoint)


def fixture_corpus() -> list[str]:
    """The English side of the made-up corpus the fixture's SentencePiece model learned."""
    path = ROOT / "tests" / "data" / "multilingual" / "make_fixtures.py"
    spec = importlib.util.spec_from_file_location("multilingual_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.corpus(1)[0]


def build_checkpoint(directory: Path, args) -> int:
    """The random checkpoint, saved with `save_pretrained`, and the fixture's tokenizer files."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    shape = dict(NLLB_600M)
    if args.layers or args.d_model:  # a smaller trial of the script
        d_model = args.d_model or shape["d_model"]
        layers = args.layers or shape["encoder_layers"]
        shape.update(
            d_model=d_model,
            encoder_layers=layers,
            decoder_layers=layers,
            encoder_attention_heads=max(1, d_model // 64),
            decoder_attention_heads=max(1, d_model // 64),
            encoder_ffn_dim=4 * d_model,
            decoder_ffn_dim=4 * d_model,
        )
    torch.manual_seed(args.seed)
    model = M2M100ForConditionalGeneration(M2M100Config(**{**shape, "init_std": INIT_STD}))
    model.eval().config.init_std = NLLB_600M["init_std"]
    with torch.no_grad():
        model.model.shared.weight[NLLB_600M["eos_token_id"]] = 0.0
    if model.lm_head.weight.data_ptr() != model.model.shared.weight.data_ptr():
        raise SystemExit("multilingual_reference: the output projection is not tied")
    # The published checkpoint's generation_config.json (transformers' defaults beyond it).
    model.generation_config.max_length = 200
    model.save_pretrained(directory)
    for name in TOKENIZER_FILES:
        shutil.copy(FIXTURE / name, directory / name)
    return sum(p.numel() for p in model.parameters())


def timed(function, *args, **kwargs):
    """(function's result, its seconds)."""
    start = time.perf_counter()
    return function(*args, **kwargs), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--count", type=int, default=64, help="sentences to tokenize")
    parser.add_argument("--max-length", type=int, default=32, help="tokens a translation")
    parser.add_argument("--check", type=int, default=8, help="sentences checked against torch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, help="fewer layers (a trial of the script)")
    parser.add_argument("--d-model", type=int, help="a smaller width (a trial of the script)")
    args = parser.parse_args()

    import ctranslate2
    import sentencepiece
    import torch
    import transformers
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    args.output.mkdir(parents=True, exist_ok=True)
    checkpoint, converted = args.output / "checkpoint", args.output / "ctranslate2"
    for path in (checkpoint, converted):
        shutil.rmtree(path, ignore_errors=True)
    parameters, built = timed(build_checkpoint, checkpoint, args)
    # As `ct2-transformers-converter --model checkpoint --output_dir ctranslate2` does.
    converter = TransformersConverter(str(checkpoint))
    _, conversion = timed(converter.convert, str(converted), quantization="float32")

    sentences = fixture_corpus()[: args.count]
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(checkpoint / TOKENIZER_FILES[0]))
    source_tokens = [[SOURCE_LANGUAGE, *pieces.encode(s, out_type=str), "</s>"] for s in sentences]
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, src_lang=SOURCE_LANGUAGE)
    theirs = [tokenizer.convert_ids_to_tokens(tokenizer(s).input_ids) for s in sentences]
    if theirs != source_tokens:
        differing = sum(a != b for a, b in zip(theirs, source_tokens))
        raise SystemExit(
            f"multilingual_reference: SentencePiece's pieces differ from "
            f"{type(tokenizer).__name__}'s on {differing}/{len(sentences)} sentences"
        )

    translator = ctranslate2.Translator(str(converted), device="cpu", compute_type="float32")
    results = translator.translate_batch(
        source_tokens,
        target_prefix=[[TARGET_LANGUAGE]] * len(source_tokens),
        beam_size=1,
        max_decoding_length=args.max_length,
        max_input_length=0,
    )
    # The checkpoint's ids: CTranslate2's vocabulary is the tokenizer's pieces in id order,
    # then made-up words up to vocab_size.
    vocabulary = json.loads((converted / "shared_vocabulary.json").read_text("utf-8"))
    index = {piece: i for i, piece in enumerate(vocabulary)}
    peer_ids = [[index[t] for t in r.hypotheses[0]] for r in results]

    # The conversion against transformers on a few sentences: greedy tokens, and the
    # log-probabilities of CTranslate2's outputs under both.
    model = M2M100ForConditionalGeneration.from_pretrained(checkpoint).eval()
    source_ids = [[index[t] for t in row] for row in source_tokens[: args.check]]
    width = max(len(row) for row in source_ids)
    pad = NLLB_600M["pad_token_id"]
    input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in source_ids])
    with torch.no_grad():
        generated = model.generate(
            input_ids=input_ids,
            attention_mask=(input_ids != pad).long(),
            num_beams=1,
            do_sample=False,
            forced_bos_token_id=index[TARGET_LANGUAGE],
            max_new_tokens=args.max_length,
        )
    same = sum(row[1:] == ids for row, ids in zip(generated.tolist(), peer_ids))
    gap = 0.0
    peer_scores = translator.score_batch(
        source_tokens[: args.check],
        [r.hypotheses[0] for r in results[: args.check]],
        max_input_length=0,
    )
    start_id = NLLB_600M["decoder_start_token_id"]
    with torch.no_grad():
        for row, target, scored in zip(source_ids, peer_ids, peer_scores):
            logits = model(
                input_ids=torch.tensor([row]), decoder_input_ids=torch.tensor([[start_id, *target]])
            ).logits[0]
            log_probs = torch.log_softmax(logits, -1)
            # CTranslate2 scores the target and then </s>: the target's tokens are compared.
            theirs = log_probs[torch.arange(len(target)), torch.tensor(target)].tolist()
            gap = max(gap, *(abs(a - b) for a, b in zip(theirs, scored.log_probs)))
    if gap > SCORE_TOLERANCE:
        raise SystemExit(
            f"multilingual_reference: CTranslate2 {ctranslate2.__version__}'s conversion scores "
            f"its outputs up to {gap:.2g} apart from transformers {transformers.__version__}"
        )

    record = dict(
        versions={
            m.__name__: m.__version__ for m in (transformers, torch, ctranslate2, sentencepiece)
        },
        settings={name: value for name, value in vars(args).items() if name != "output"},
        parameters=parameters,
        vocabulary=NLLB_600M["vocab_size"],
        max_length=args.max_length,
        languages=[SOURCE_LANGUAGE, TARGET_LANGUAGE],
        build_seconds=built,
        conversion_seconds=conversion,
        checkpoint_bytes=sum(f.stat().st_size for f in checkpoint.iterdir()),
        checked_against_transformers=len(source_ids),
        same_greedy_as_transformers=same,
        log_prob_gap=gap,
        sentences_file="tests/data/multilingual/make_fixtures.py corpus(1), English side",
        sentences=sentences,
        source_tokens=source_tokens,
        peer_greedy_ids=peer_ids,
    )
    (args.output / "reference.json").write_text(json.dumps(record, ensure_ascii=False), "utf-8")
    print(
        f"{checkpoint}: {parameters:,} parameters, built in {built:.0f}s; converted by "
        f"CTranslate2 {ctranslate2.__version__} in {conversion:.0f}s; its greedy tokens equal "
        f"transformers {transformers.__version__}'s on {same}/{len(source_ids)} sentences, the "
        f"log-probabilities of its outputs within {gap:.1e}"
    )


if __name__ == "__main__":
    main()
