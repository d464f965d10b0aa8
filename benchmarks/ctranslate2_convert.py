"""A keras_transformer model as a CTranslate2 model on the same weights (benchmarks only).

    python benchmarks/ctranslate2_convert.py RUN_DIR OUTPUT_DIR [--average-last N]

CTranslate2 (OpenNMT's inference engine, `pip install -e ".[benchmarks]"`) is the peer that
benchmarks/decode.py times our SavedModel against. The conversion maps every weight onto
`ctranslate2.specs.TransformerSpec`:

- token embeddings, scaled by sqrt(d_model) (`scale_embeddings`);
- the sinusoidal positions as an explicit table (ours interleave sines and cosines, as the
  paper writes them; CTranslate2's built-in table puts them in two halves);
- post-LN or pre-LN blocks (`normalize_first`) with the stacks' final layer norms;
- query/key/value projections fused the way CTranslate2 stores them (one matrix for
  self-attention, query plus one key/value matrix for cross-attention);
- the output projection: the final Dense layer, or the target embedding when tied;
- the layer-norm epsilon, and the vocabularies with our reserved tokens as its specials.

What CTranslate2's spec cannot express is refused with the reason: an activation other
than relu/gelu/swish, a vocabulary with repeated pieces. Sources are given to CTranslate2
as our own token pieces with [START] and [END] already in place (our tokenizers add
them), and it starts decoding from [START], as our decoder does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from keras_transformer.constants import END_ID, START_ID, UNK_ID
from keras_transformer.layers.embedding import positional_encoding

# keras activation name -> ctranslate2.specs.Activation member.
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH", "silu": "SWISH"}


def _numpy(variable) -> np.ndarray:
    return np.asarray(variable.numpy(), dtype=np.float32)


def _linear(spec, dense) -> None:
    """A Keras Dense/EinsumDense (kernel (in, out)) into a LinearSpec (weight (out, in))."""
    kernel = _numpy(dense.kernel)
    spec.weight = kernel.reshape(kernel.shape[0], -1).T.copy()
    if getattr(dense, "bias", None) is not None:
        spec.bias = _numpy(dense.bias).reshape(-1)


def _fused(spec, denses) -> None:
    """Several projections of one input as one LinearSpec (their outputs stacked)."""
    from ctranslate2.specs import common_spec

    parts = []
    for dense in denses:
        part = common_spec.LinearSpec()
        _linear(part, dense)
        parts.append(part)
    spec.weight = np.concatenate([p.weight for p in parts])
    spec.bias = np.concatenate([p.bias for p in parts])


def _layer_norm(spec, norm) -> None:
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta)


def _attention(spec, attention, self_attention: bool) -> None:
    """One of our attention sublayers: projections in `.mha`, norm in `.residual`."""
    mha = attention.mha
    if self_attention:
        _fused(spec.linear[0], [mha.query_dense, mha.key_dense, mha.value_dense])
    else:
        _linear(spec.linear[0], mha.query_dense)
        _fused(spec.linear[1], [mha.key_dense, mha.value_dense])
    _linear(spec.linear[-1], mha.output_dense)
    _layer_norm(spec.layer_norm, attention.residual.layernorm)


def _feed_forward(spec, feed_forward) -> None:
    _linear(spec.linear_0, feed_forward.inner_dense)
    _linear(spec.linear_1, feed_forward.output_dense)
    _layer_norm(spec.layer_norm, feed_forward.residual.layernorm)


def _inputs(spec, embedding, positions: int) -> None:
    spec_embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    spec_embeddings.weight = _numpy(embedding.embedding.embeddings)
    spec.scale_embeddings = True  # sqrt(d_model), as PositionalEmbedding does
    spec.position_encodings.encodings = positional_encoding(positions, embedding.d_model)


def _vocabulary(tokenizer, side: str) -> list[str]:
    vocabulary = [str(piece) for piece in tokenizer.get_vocab()]
    if len(set(vocabulary)) != len(vocabulary):
        raise ValueError(
            f"The {side} vocabulary repeats a piece; CTranslate2 addresses tokens by their "
            "text, so it cannot hold this vocabulary."
        )
    return vocabulary


def to_spec(model, source_tokenizer, target_tokenizer):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights."""
    from ctranslate2.specs import common_spec, transformer_spec

    if model.activation not in ACTIVATIONS:
        raise ValueError(
            f"CTranslate2 has no {model.activation!r} activation; the converter knows "
            f"{sorted(ACTIVATIONS)}."
        )
    spec = transformer_spec.TransformerSpec.from_config(
        (model.num_layers, model.num_layers),
        model.num_heads,
        pre_norm=bool(model.normalize_first),
        activation=getattr(common_spec.Activation, ACTIVATIONS[model.activation]),
    )
    positions = int(model.max_length)
    encoder, decoder = model.encoder, model.decoder
    _inputs(spec.encoder, encoder.embedding, positions)
    for layer_spec, block in zip(spec.encoder.layer, encoder.enc_layers, strict=True):
        _attention(layer_spec.self_attention, block.self_attention, self_attention=True)
        _feed_forward(layer_spec.ffn, block.ffn)
    _inputs(spec.decoder, decoder.embedding, positions)
    for layer_spec, block in zip(spec.decoder.layer, decoder.dec_layers, strict=True):
        _attention(layer_spec.self_attention, block.causal_self_attention, self_attention=True)
        _attention(layer_spec.attention, block.cross_attention, self_attention=False)
        _feed_forward(layer_spec.ffn, block.ffn)
    if model.normalize_first:
        _layer_norm(spec.encoder.layer_norm, encoder.final_layernorm)
        _layer_norm(spec.decoder.layer_norm, decoder.final_layernorm)
    if model.final_layer is None:  # tied: logits = features . target embedding^T
        spec.decoder.projection.weight = _numpy(decoder.embedding.embedding.embeddings)
    else:
        _linear(spec.decoder.projection, model.final_layer)

    source_vocabulary = _vocabulary(source_tokenizer, "source")
    target_vocabulary = _vocabulary(target_tokenizer, "target")
    spec.register_source_vocabulary(source_vocabulary)
    spec.register_target_vocabulary(target_vocabulary)
    spec.config.unk_token = target_vocabulary[UNK_ID]
    spec.config.bos_token = target_vocabulary[START_ID]
    spec.config.eos_token = target_vocabulary[END_ID]
    spec.config.decoder_start_token = target_vocabulary[START_ID]
    spec.config.layer_norm_epsilon = float(model.layer_norm_epsilon)
    return spec


def convert(model, source_tokenizer, target_tokenizer, output_dir) -> Path:
    """Writes `model` as a float32 CTranslate2 model into `output_dir`; returns it."""
    spec = to_spec(model, source_tokenizer, target_tokenizer)
    spec.validate()
    spec.optimize(quantization=None)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(output_dir))
    return output_dir


def source_pieces(tokenizer, texts: list[str], max_source_length: int) -> list[list[str]]:
    """Our tokenizer's ids for `texts` ([START] ... [END]) as CTranslate2's token strings,
    cut at `max_source_length` with [END] kept, as the export cuts them."""
    vocabulary = [str(piece) for piece in tokenizer.get_vocab()]
    rows = []
    for ids in tokenizer.tokenize(texts).to_list():
        if len(ids) > max_source_length:
            ids = ids[: max_source_length - 1] + [END_ID]
        rows.append([vocabulary[i] for i in ids])
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished training run")
    parser.add_argument("output_dir", help="where the CTranslate2 model goes")
    parser.add_argument("--average-last", type=int, default=None, help="as `export`")
    args = parser.parse_args(argv)
    from keras_transformer.training import run_dir as run_dir_lib

    try:
        model, source, target, _ = run_dir_lib.load_run(
            args.run_dir, average_last=args.average_last
        )
        print(convert(model, source, target, args.output_dir))
    except (ValueError, OSError) as error:
        sys.exit(f"ctranslate2_convert: error: {error}")


if __name__ == "__main__":
    main()
