"""Decoding speed through exported SavedModels: cached vs the tutorial's way vs KerasHub.

Sentences per second on TED pt->en test sentences, at batch 1 and 64, greedy and
beam 4, for three SavedModels built in this run from tutorial-size models
(4 layers, d_model 128, dff 512, 8 heads), each with the same tokenizers inside:

- cached:   keras_transformer's Translator (key/value cache, in-graph loop);
- uncached: the same Translator re-running the encoder and the whole decoder
            prefix at every step (the tutorial's way);
- kerashub: a same-size model from keras_hub layers (TokenAndPositionEmbedding,
            TransformerEncoder, TransformerDecoder with its self/cross-attention
            caches) decoded by keras_hub.samplers.GreedySampler / BeamSampler.

The models are untrained (random weights): every method decodes exactly
`--steps` tokens per sentence (stopping at [END] is disabled), so all do the
same work. The vocabularies are learned from the first `--vocab-lines` lines of
the TED training text.

    python benchmarks/decode.py                       # 64 sentences, 32 steps
    python benchmarks/decode.py --sentences 256 --steps 64

With `--run-dir`, a trained run against CTranslate2 on the same weights instead:
the run's default export (as `keras-transformer export` writes it) and the run
converted by `ctranslate2_convert.py`, both float32 on the machine's cores. Greedy
outputs are compared on every sentence before any timing (the run stops if one
differs); then sentences/s at batch 1 and 64, greedy and beam 4, and the ratio.
Each stops at [END], as a served model does. `--jit-compile` adds the run's export
made with XLA (`keras-transformer export --jit-compile`), checked against the default
export's greedy outputs and timed after one untimed pass that compiles its shapes.

    python benchmarks/decode.py --run-dir runs/quality_ted \\
        --source ../shared/corpora/ted_pt_en/test.pt --sentences 128

The header names TensorFlow's CPU kernels. On Linux, on CPUs with AVX512-VNNI,
AVX512-BF16 or AMX, TensorFlow turns its oneDNN kernels on, which decoded slower at
batch 64 than its Eigen kernels; `TF_ENABLE_ONEDNN_OPTS=0` before the command times
Eigen's, as `keras-transformer translate` and the README's serving setup run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import types
from pathlib import Path

import keras
import tensorflow as tf
from common import cpu_kernels

from keras_transformer import Transformer
from keras_transformer.constants import START_ID
from keras_transformer.inference.batch_decoding import DEFAULT_MAX_LENGTH_A, DEFAULT_MAX_LENGTH_B
from keras_transformer.inference.export import export_translator
from keras_transformer.inference.translator import TEXT_SPEC, Translator
from keras_transformer.text.tokenizers import Tokenizer, learn_vocabulary

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpora" / "ted_pt_en"
SIZE = dict(num_layers=4, d_model=128, num_heads=8, dff=512)


def read_lines(path: Path, count: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(count), f, strict=False)]


class KerasHubTranslator(tf.Module):
    """Same-size encoder-decoder from keras_hub layers, decoded by keras_hub samplers."""

    def __init__(self, source_tokenizer, target_tokenizer, max_source: int, steps: int):
        import keras_hub

        super().__init__(name="kerashub_translator")
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.max_source, self.steps = max_source, steps
        d, heads, dff, layers = SIZE["d_model"], SIZE["num_heads"], SIZE["dff"], SIZE["num_layers"]
        hub = keras_hub.layers
        parts = types.SimpleNamespace(
            source_embedding=hub.TokenAndPositionEmbedding(
                source_tokenizer.vocab_size, max_source, d
            ),
            target_embedding=hub.TokenAndPositionEmbedding(
                target_tokenizer.vocab_size, steps + 1, d
            ),
            encoders=[hub.TransformerEncoder(dff, heads) for _ in range(layers)],
            decoders=[hub.TransformerDecoder(dff, heads) for _ in range(layers)],
            output=keras.layers.Dense(target_tokenizer.vocab_size),
        )
        # Build every layer with one call, then track variables only (as Translator does).
        source = tf.ones([1, 4], tf.int64)
        context = self._encode(parts, source)
        x = parts.target_embedding(tf.ones([1, 2], tf.int64))
        for layer in parts.decoders:
            x = layer(x, context)
        parts.output(x)
        self._parts = parts
        variables = []
        for layer in [parts.source_embedding, parts.target_embedding, parts.output]:
            variables += layer.variables
        for layer in parts.encoders + parts.decoders:
            variables += layer.variables
        self.model_variables = [v.value for v in variables]

    @staticmethod
    def _encode(parts, ids):
        mask = tf.not_equal(ids, 0)
        x = parts.source_embedding(ids)
        for layer in parts.encoders:
            x = layer(x, padding_mask=mask)
        return x

    def _decode(self, text, sampler):
        parts = self._parts
        tokens = self.source_tokenizer.tokenize(text)[:, : self.max_source].to_tensor()
        context = self._encode(parts, tokens)
        context_mask = tf.not_equal(tokens, 0)
        batch = tf.shape(tokens)[0]
        d_head = SIZE["d_model"] // SIZE["num_heads"]
        self_cache = tf.zeros(
            [batch, SIZE["num_layers"], 2, self.steps + 1, SIZE["num_heads"], d_head]
        )
        cross_cache = tf.zeros(
            [batch, SIZE["num_layers"], 2, tf.shape(tokens)[1], SIZE["num_heads"], d_head]
        )

        def call_decoder(ids, cache, index, cross_index):
            self_cache, cross_cache, context, context_mask = cache
            x = parts.target_embedding(ids, start_index=index)
            self_caches, cross_caches = [], []
            for i, layer in enumerate(parts.decoders):
                x, self_i, cross_i = layer(
                    x,
                    encoder_sequence=context,
                    encoder_padding_mask=context_mask,
                    self_attention_cache=self_cache[:, i],
                    self_attention_cache_update_index=index,
                    cross_attention_cache=cross_cache[:, i],
                    cross_attention_cache_update_index=cross_index,
                )
                self_caches.append(self_i)
                cross_caches.append(cross_i)
            cache = (tf.stack(self_caches, 1), tf.stack(cross_caches, 1), context, context_mask)
            return parts.output(x)[:, 0, :], cache

        prompt = tf.concat(
            [
                tf.fill([batch, 1], tf.constant(START_ID, tf.int64)),
                tf.zeros([batch, self.steps], tf.int64),
            ],
            axis=1,
        )
        # Fill the cross-attention caches once (cross_attention_cache_update_index=0).
        _, cache = call_decoder(
            prompt[:, :1], (self_cache, cross_cache, context, context_mask), 0, 0
        )

        def next_logits(prompt, cache, index):
            logits, cache = call_decoder(prompt[:, index - 1 : index], cache, index - 1, None)
            return logits, None, cache

        generated = sampler(next_logits, prompt, cache=cache, index=1)
        ids = tf.RaggedTensor.from_tensor(generated[:, 1:])
        return {
            "translation": self.target_tokenizer.detokenize(ids),
            "score": tf.zeros([batch]),
        }

    def signatures(self, beam_width: int) -> dict:
        import keras_hub

        greedy = keras_hub.samplers.GreedySampler()
        beam = keras_hub.samplers.BeamSampler(num_beams=beam_width)

        @tf.function(input_signature=[TEXT_SPEC])
        def serving_default(text):
            return self._decode(text, greedy)

        @tf.function(input_signature=[TEXT_SPEC])
        def beam_search(text):
            return self._decode(text, beam)

        return {"serving_default": serving_default, "beam_search": beam_search}


def sentences_per_second(
    signature, sentences: list[str], batch_size: int, repeats: int, warm_all: bool = False
) -> float:
    """Best of `repeats` passes; `warm_all` runs every batch once first (an XLA export
    compiles each new shape on its first call)."""
    batches = [
        tf.constant(sentences[i : i + batch_size]) for i in range(0, len(sentences), batch_size)
    ]
    for batch in batches if warm_all else batches[:1]:  # warm-up
        signature(text=batch)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in batches:
            signature(text=batch)["translation"].numpy()
        best = min(best, time.perf_counter() - start)
    return len(sentences) / best


def ctranslate2_rate(translator, batches, beam: int, max_length: int, repeats: int) -> float:
    """Sentences/s of a `ctranslate2.Translator` over pre-tokenized `batches`."""
    # max_input_length=0: CTranslate2 would otherwise cut sources at 1,024 tokens.
    options = dict(beam_size=beam, max_decoding_length=max_length, max_input_length=0)
    translator.translate_batch(batches[0], **options)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in batches:
            translator.translate_batch(batch, **options)
        best = min(best, time.perf_counter() - start)
    return sum(len(b) for b in batches) / best


def compare_with_ctranslate2(args) -> None:
    """A trained run's default export against CTranslate2 on the same weights."""
    import os

    import ctranslate2
    import ctranslate2_convert

    from keras_transformer.inference import export
    from keras_transformer.training import run_dir

    sentences = read_lines(Path(args.source), args.sentences)
    model, source_tokenizer, target_tokenizer, _ = run_dir.load_run(
        args.run_dir, average_last=args.average_last
    )
    threads = os.cpu_count()
    with tempfile.TemporaryDirectory() as root:
        path = export.export_run(args.run_dir, root, "ours", average_last=args.average_last)
        ours = tf.saved_model.load(str(path))
        limits = {k: int(v) for k, v in ours.serving_limits().items()}
        xla = None
        if args.jit_compile:
            xla_path = export.export_run(
                args.run_dir, root, "ours_xla", average_last=args.average_last, jit_compile=True
            )
            xla = tf.saved_model.load(str(xla_path))
        converted = ctranslate2_convert.convert(
            model, source_tokenizer, target_tokenizer, Path(root) / "ctranslate2"
        )
        peer = ctranslate2.Translator(
            str(converted),
            device="cpu",
            compute_type="float32",
            inter_threads=1,
            intra_threads=threads,
        )
        pieces = ctranslate2_convert.source_pieces(
            source_tokenizer, sentences, limits["max_source_length"]
        )
        vocabulary = {str(p): i for i, p in enumerate(target_tokenizer.get_vocab())}

        capped, peer_targets = [], []

        def peer_texts(batch):
            """CTranslate2's greedy output, cut as the export's source-relative cap cuts a
            row (CTranslate2 has one limit for all rows): a row that reaches
            a * source tokens + b ends there with [END]."""
            results = peer.translate_batch(
                batch, beam_size=1, max_decoding_length=limits["max_length"], max_input_length=0
            )
            ids = []
            for row, result in zip(batch, results):
                row_ids = [vocabulary[p] for p in result.hypotheses[0]]
                limit = int(DEFAULT_MAX_LENGTH_A * (len(row) - 2) + DEFAULT_MAX_LENGTH_B)
                limit = min(max(limit, 1), limits["max_length"])
                if len(row_ids) + 1 > limit:  # its [END] would come after the limit
                    capped.append(row)
                    row_ids = row_ids[: limit - 1]
                ids.append(row_ids)
                peer_targets.append(result.hypotheses[0][: len(row_ids)])
            ids = tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1)
            text = target_tokenizer.detokenize(ids)
            return [t.decode("utf-8") for t in text.numpy()]

        ours_greedy, peer_greedy, ours_scores = [], [], []
        for i in range(0, len(sentences), 64):
            out = ours.signatures["serving_default"](text=tf.constant(sentences[i : i + 64]))
            ours_greedy += [t.decode("utf-8") for t in out["translation"].numpy()]
            ours_scores += out["score"].numpy().tolist()
            peer_greedy += peer_texts(pieces[i : i + 64])
        differing = [i for i, (a, b) in enumerate(zip(ours_greedy, peer_greedy)) if a != b]
        # Equal argmaxes can hide small differences (an epsilon, a scale): the
        # log-probability of each output under both, [END] included, must agree too.
        peer_scores = [
            sum(r.log_probs) for r in peer.score_batch(pieces, peer_targets, max_input_length=0)
        ]
        score_gap = max(abs(a - b) for a, b in zip(ours_scores, peer_scores))
        print(
            f"{args.run_dir}: {model.count_params():,} parameters, "
            f"{model.num_layers}+{model.num_layers} layers, d_model {model.d_model}; "
            f"export limits {limits}; CTranslate2 {ctranslate2.__version__}, "
            f"{threads} threads, float32; {_tensorflow_settings()}"
        )
        print(
            f"greedy outputs identical on {len(sentences) - len(differing)}/{len(sentences)} "
            f"sentences of {args.source} ({len(capped)} cut by the export's source-relative "
            "cap; CTranslate2 decodes those on to its one limit when timed); "
            f"log-probabilities of the outputs differ by at most {score_gap:.1e}"
        )
        if differing or score_gap > 1e-3:
            for i in differing[:3]:
                print(f"  {i}: ours {ours_greedy[i]!r}\n  {i}: peer {peer_greedy[i]!r}")
            raise SystemExit("decode.py: the conversion is not exact; nothing timed")
        if xla is not None:
            xla_greedy = []
            for i in range(0, len(sentences), 64):
                out = xla.signatures["serving_default"](text=tf.constant(sentences[i : i + 64]))
                xla_greedy += [t.decode("utf-8") for t in out["translation"].numpy()]
            same = sum(a == b for a, b in zip(xla_greedy, ours_greedy))
            print(
                f"XLA export (--jit-compile): greedy outputs identical on {same}/{len(sentences)}"
            )
            if same != len(sentences):
                raise SystemExit("decode.py: the XLA export translates differently; nothing timed")

        print(
            f"\n{'search':<8} {'batch':>5} {'SavedModel sent/s':>18} {'CTranslate2 sent/s':>19}"
            f" {'ours/CTranslate2':>17}"
            + (f" {'XLA export sent/s':>18} {'XLA/CTranslate2':>16}" if xla is not None else "")
        )
        for search in ("serving_default", "beam_search"):
            beam = 1 if search == "serving_default" else args.beam_width
            for batch_size in args.batch_sizes:
                count = args.batch1_sentences if batch_size == 1 else len(sentences)
                ours_rate = sentences_per_second(
                    ours.signatures[search], sentences[:count], batch_size, args.repeats
                )
                batches = [pieces[i : i + batch_size] for i in range(0, count, batch_size)]
                peer_rate = ctranslate2_rate(
                    peer, batches, beam, limits["max_length"], args.repeats
                )
                label = "greedy" if beam == 1 else f"beam{beam}"
                row = (
                    f"{label:<8} {batch_size:>5} {ours_rate:>18.1f} {peer_rate:>19.1f}"
                    f" {ours_rate / peer_rate:>16.2f}x"
                )
                if xla is not None:
                    xla_rate = sentences_per_second(
                        xla.signatures[search],
                        sentences[:count],
                        batch_size,
                        args.repeats,
                        warm_all=True,
                    )
                    row += f" {xla_rate:>18.1f} {xla_rate / peer_rate:>15.2f}x"
                print(row, flush=True)


def _tensorflow_settings() -> str:
    """TensorFlow's CPU kernels and intra-op thread setting, for the table's header: on
    CPUs with AVX512-VNNI, AVX512-BF16 or AMX its oneDNN kernels are on unless
    `TF_ENABLE_ONEDNN_OPTS=0`, and they decoded slower than its Eigen kernels
    (benchmarks/RESULTS.md)."""
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    return f"TensorFlow {cpu_kernels()} kernels, intra-op threads {threads or 'default'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32, help="tokens decoded per sentence")
    parser.add_argument("--vocab-lines", type=int, default=4000)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--batch1-sentences", type=int, default=16, help="fewer at batch 1")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes; best kept")
    parser.add_argument("--skip-kerashub", action="store_true")
    parser.add_argument("--run-dir", help="a trained run: time its export against CTranslate2")
    parser.add_argument("--source", help="with --run-dir: source sentences, one a line")
    parser.add_argument("--average-last", type=int, default=None, help="with --run-dir")
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="with --run-dir: also time an export made with --jit-compile (XLA)",
    )
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        default=None,
        help="TensorFlow's threads within one op, for our side (default: TensorFlow's, one "
        "a core); 1 is the model server's --tensorflow_intra_op_parallelism=1",
    )
    args = parser.parse_args()
    if args.intra_op_threads is not None:
        # Before any op runs: TensorFlow fixes its thread pools when it first starts.
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    if args.run_dir:
        if not args.source:
            parser.error("--run-dir needs --source")
        compare_with_ctranslate2(args)
        return

    keras.utils.set_random_seed(0)
    corpus = args.corpus.resolve()
    start = time.perf_counter()
    source_vocab = learn_vocabulary(
        read_lines(corpus / "train.pt", args.vocab_lines), args.vocab_size
    )
    target_vocab = learn_vocabulary(
        read_lines(corpus / "train.en", args.vocab_lines), args.vocab_size
    )
    print(
        f"vocabularies: pt {len(source_vocab)}, en {len(target_vocab)} tokens "
        f"from {args.vocab_lines} lines ({time.perf_counter() - start:.0f}s)"
    )
    source_tokenizer = Tokenizer(source_vocab, name="source_tokenizer")
    target_tokenizer = Tokenizer(target_vocab, name="target_tokenizer")
    sentences = read_lines(corpus / "test.pt", args.sentences)
    max_source = 128
    model = Transformer(
        input_vocab_size=len(source_vocab),
        target_vocab_size=len(target_vocab),
        max_length=max_source,
        **SIZE,
    )
    model((tf.ones([1, 4], tf.int64), tf.ones([1, 4], tf.int64)))
    common = dict(max_length=args.steps, beam_width=args.beam_width, stop_at_end=False)
    exports = {}
    with tempfile.TemporaryDirectory() as root:
        for name, use_cache in (("cached", True), ("uncached", False)):
            translator = Translator(
                model, source_tokenizer, target_tokenizer, use_cache=use_cache, **common
            )
            exports[name] = export_translator(translator, root, name)
        if not args.skip_kerashub:
            hub = KerasHubTranslator(source_tokenizer, target_tokenizer, max_source, args.steps)
            path = Path(root) / "kerashub" / "1"
            tf.saved_model.save(hub, str(path), signatures=hub.signatures(args.beam_width))
            exports["kerashub"] = path
        loaded = {name: tf.saved_model.load(str(path)) for name, path in exports.items()}

        print(
            f"\n{len(sentences)} TED test sentences ({args.batch1_sentences} at batch 1), "
            f"{args.steps} tokens each, SavedModel signatures, {SIZE}; {_tensorflow_settings()}"
        )
        print(
            f"{'search':<8} {'batch':>5} "
            + " ".join(f"{n + ' sent/s':>17}" for n in loaded)
            + "   cached/uncached  cached/kerashub"
        )
        for search in ("serving_default", "beam_search"):
            for batch_size in args.batch_sizes:
                subset = sentences[: args.batch1_sentences] if batch_size == 1 else sentences
                rates = {
                    name: sentences_per_second(
                        m.signatures[search], subset, batch_size, args.repeats
                    )
                    for name, m in loaded.items()
                }
                label = "greedy" if search == "serving_default" else f"beam{args.beam_width}"
                line = f"{label:<8} {batch_size:>5} " + " ".join(
                    f"{r:>17.1f}" for r in rates.values()
                )
                line += f"   {rates['cached'] / rates['uncached']:>15.2f}x"
                if "kerashub" in rates:
                    line += f"  {rates['cached'] / rates['kerashub']:>14.2f}x"
                print(line, flush=True)


if __name__ == "__main__":
    main()
