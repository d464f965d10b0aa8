"""A random MarianMT checkpoint of OPUS-MT's base size, and CTranslate2's conversion of it.

The reference half of benchmarks/marian.py, run by the Python of an environment that has
torch and transformers (the library never needs them), with the versions this was
checked with pinned in benchmarks/marian_reference_requirements.txt:

    python -m venv refenv
    refenv/bin/pip install -r benchmarks/marian_reference_requirements.txt
    refenv/bin/python benchmarks/marian_reference.py OUT --sentences FILE

It writes, under OUT:

- checkpoint/: what `save_pretrained` writes for a MarianMT model and its tokenizer
  (config.json, model.safetensors, generation_config.json, source.spm, target.spm,
  vocab.json, tokenizer_config.json, special_tokens_map.json), the shape of
  Helsinki-NLP/opus-mt-en-de: 6+6 post-LN layers, d_model 512, 8 heads, feed-forward 2048,
  swish, scaled embeddings, static sinusoidal positions, one vocabulary of 58,101 entries
  shared by the encoder, the decoder and the output projection, `</s>` 0 and `<pad>` 58,100.
  The weights are random (transformers' initialisation, seeded, with a standard deviation
  of 0.05 rather than 0.02, so that each sentence gets its own output), the final logits
  bias too, except `</s>`'s, which is -100: no row ever ends early, so every implementation
  decodes exactly as many steps as its length cap allows and all do the same work. The
  SentencePiece models are small (unigram, `--spm-vocab` pieces, learned from
  `--spm-source` / `--spm-target`); vocab.json holds their pieces, then filler pieces up
  to the base size, so the embedding and output projection have OPUS-MT's size;
- ctranslate2/: the checkpoint converted by CTranslate2's own converter for transformers'
  Marian (`ctranslate2.converters.TransformersConverter`, float32);
- reference.json: the sentences, their source tokens as MarianTokenizer makes them (pieces,
  `</s>` appended: what CTranslate2 takes), CTranslate2's greedy translations decoded by
  MarianTokenizer (`decode(..., skip_special_tokens=True)`, without the token of the
  cap's last step, where transformers and the library end a row with `</s>`), the
  versions, the conversion time, and the check that CTranslate2's greedy tokens equal transformers'
  `generate(num_beams=1)` on the first `--check` sentences (it stops if they differ: the
  converter does not fit this transformers version).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpora" / "multi30k"

# Helsinki-NLP/opus-mt-en-de's config.json, as transformers' MarianConfig takes it.
OPUS_MT_BASE = dict(
    vocab_size=58101,
    decoder_vocab_size=58101,
    max_position_embeddings=512,
    encoder_layers=6,
    encoder_ffn_dim=2048,
    encoder_attention_heads=8,
    decoder_layers=6,
    decoder_ffn_dim=2048,
    decoder_attention_heads=8,
    d_model=512,
    activation_function="swish",
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    init_std=0.02,
    scale_embedding=True,
    static_position_embeddings=True,
    normalize_before=False,
    normalize_embedding=False,
    add_final_layer_norm=False,
    add_bias_logits=False,
    share_encoder_decoder_embeddings=True,
    pad_token_id=58100,
    decoder_start_token_id=58100,
    eos_token_id=0,
    bos_token_id=0,
    forced_eos_token_id=0,
    bad_words_ids=[[58100]],
    num_beams=4,
    max_length=512,
    architectures=["MarianMTModel"],
)
EOS_BIAS = -100.0  # the final logits bias of </s>: no row ends before its length cap
INIT_STD = 0.05  # the random weights' standard deviation (build_checkpoint)


def read_lines(path: Path, count: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(count), f, strict=False)]


def train_spm(text: Path, prefix: Path, vocab_size: int) -> Path:
    """A unigram SentencePiece model (ids: <unk> 0, <s> 1, </s> 2, as OPUS-MT's)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def joint_vocabulary(spm_models: list[Path], size: int) -> dict[str, int]:
    """vocab.json as OPUS-MT's: `</s>` 0, `<unk>` 1, the models' pieces, `<pad>` last;
    filler pieces (never produced by the SentencePiece models) make up `size`."""
    import sentencepiece as spm

    pieces = ["</s>", "<unk>"]
    seen = set(pieces)
    for path in spm_models:
        model = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(model.get_piece_size()):
            piece = model.id_to_piece(i)
            if piece not in seen and not model.is_control(i) and not model.is_unknown(i):
                pieces.append(piece)
                seen.add(piece)
    filler = 0
    while len(pieces) < size - 1:
        piece = f"\u2581filler{filler}"
        filler += 1
        if piece not in seen:
            pieces.append(piece)
    pieces.append("<pad>")
    return {piece: i for i, piece in enumerate(pieces)}


def build_checkpoint(directory: Path, args) -> tuple[int, int]:
    """The random checkpoint and its tokenizer, saved with `save_pretrained`."""
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    work = directory.parent / "spm"
    work.mkdir(parents=True, exist_ok=True)
    source_spm = train_spm(args.spm_source, work / "source", args.spm_vocab)
    target_spm = train_spm(args.spm_target, work / "target", args.spm_vocab)
    vocabulary = joint_vocabulary([source_spm, target_spm], OPUS_MT_BASE["vocab_size"])
    (work / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False), "utf-8")
    tokenizer = MarianTokenizer(
        str(source_spm),
        str(target_spm),
        str(work / "vocab.json"),
        source_lang="en",
        target_lang="de",
    )

    # Drawn with 2.5x transformers' init_std: at 0.02 the source barely reaches the
    # decoder, and every sentence's greedy output is the same token repeated (at 0.05 each
    # sentence repeats its own), which would make the check of equal outputs empty. The
    # config keeps OPUS-MT's 0.02.
    torch.manual_seed(args.seed)
    model = MarianMTModel(MarianConfig(**{**OPUS_MT_BASE, "init_std": INIT_STD})).eval()
    model.config.init_std = OPUS_MT_BASE["init_std"]
    with torch.no_grad():
        bias = torch.randn_like(model.final_logits_bias) * OPUS_MT_BASE["init_std"]
        bias[0, OPUS_MT_BASE["eos_token_id"]] = EOS_BIAS
        model.final_logits_bias.copy_(bias)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    spm_pieces = len([p for p in vocabulary if not p.startswith("\u2581filler")])
    return spm_pieces, sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--sentences", type=Path, default=CORPUS / "train.en")
    parser.add_argument("--count", type=int, default=64, help="sentences to tokenize")
    parser.add_argument("--spm-source", type=Path, default=CORPUS / "train.en")
    parser.add_argument("--spm-target", type=Path, default=CORPUS / "train.de")
    parser.add_argument("--spm-vocab", type=int, default=4000)
    parser.add_argument("--max-length", type=int, default=64, help="tokens a translation")
    parser.add_argument("--check", type=int, default=8, help="sentences checked against torch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import ctranslate2
    import sentencepiece
    import torch
    import transformers
    from transformers import MarianMTModel, MarianTokenizer

    args.output.mkdir(parents=True, exist_ok=True)
    checkpoint, converted = args.output / "checkpoint", args.output / "ctranslate2"
    for path in (checkpoint, converted):
        shutil.rmtree(path, ignore_errors=True)
    start = time.perf_counter()
    spm_pieces, parameters = build_checkpoint(checkpoint, args)
    built = time.perf_counter() - start

    start = time.perf_counter()
    ctranslate2.converters.TransformersConverter(str(checkpoint)).convert(
        str(converted), quantization="float32"
    )
    conversion = time.perf_counter() - start

    tokenizer = MarianTokenizer.from_pretrained(checkpoint)
    sentences = read_lines(args.sentences, args.count)
    source_ids = [tokenizer(s).input_ids for s in sentences]
    source_tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in source_ids]

    translator = ctranslate2.Translator(str(converted), device="cpu", compute_type="float32")
    results = translator.translate_batch(
        source_tokens, beam_size=1, max_decoding_length=args.max_length, max_input_length=0
    )
    peer_tokens = [r.hypotheses[0] for r in results]
    peer_ids = [tokenizer.convert_tokens_to_ids(t) for t in peer_tokens]
    # Without the token of the cap's last step, which transformers and the library make
    # </s> (CTranslate2 decodes one more token instead).
    peer_texts = [
        tokenizer.decode(ids[: args.max_length - 1], skip_special_tokens=True) for ids in peer_ids
    ]

    # CTranslate2's converter against transformers' own greedy search on a few sentences.
    model = MarianMTModel.from_pretrained(checkpoint).eval()
    check = sentences[: args.check]
    with torch.no_grad():
        batch = tokenizer(check, return_tensors="pt", padding=True)
        generated = model.generate(
            **batch, num_beams=1, do_sample=False, max_new_tokens=args.max_length
        )
    same = 0
    for row, ids in zip(generated.tolist(), peer_ids):
        # transformers starts from <pad>, pads ended rows with it, and makes a row's last
        # token </s> at its cap (`forced_eos_token_id`), where CTranslate2 decodes one more.
        row = [i for i in row[1:] if i != OPUS_MT_BASE["pad_token_id"]]
        same += row[:-1] == ids[: len(row) - 1]
    if same != len(check):
        raise SystemExit(
            f"marian_reference: CTranslate2 {ctranslate2.__version__}'s conversion translates "
            f"{len(check) - same}/{len(check)} sentences differently from transformers "
            f"{transformers.__version__}"
        )

    record = dict(
        versions=dict(
            transformers=transformers.__version__,
            torch=torch.__version__,
            ctranslate2=ctranslate2.__version__,
            sentencepiece=sentencepiece.__version__,
        ),
        parameters=parameters,
        vocabulary=OPUS_MT_BASE["vocab_size"],
        spm_pieces=spm_pieces,
        max_length=args.max_length,
        build_seconds=built,
        conversion_seconds=conversion,
        checked_against_transformers=len(check),
        sentences_file=str(args.sentences),
        sentences=sentences,
        source_tokens=source_tokens,
        peer_greedy=peer_texts,
        peer_greedy_lengths=[len(t) for t in peer_tokens],
    )
    (args.output / "reference.json").write_text(json.dumps(record, ensure_ascii=False), "utf-8")
    print(
        f"{checkpoint}: {parameters:,} parameters, vocabulary {OPUS_MT_BASE['vocab_size']:,} "
        f"({spm_pieces:,} SentencePiece pieces), built in {built:.0f}s; converted by "
        f"CTranslate2 {ctranslate2.__version__} in {conversion:.0f}s; its greedy output equals "
        f"transformers {transformers.__version__}'s on {same}/{len(check)} sentences"
    )


if __name__ == "__main__":
    main()
