"""The Transformer's own options, written once.

`Transformer` takes these beyond its sizes and the block options
(`layers.options.BLOCK_OPTIONS`), stores them under their own names and lists them in
`get_config`; `TrainConfig` and the command line derive their fields and flags, with
these defaults and help, from the same dicts.
"""

# The model's own options beyond the block options, with their defaults.
MODEL_OPTIONS = {
    "max_length": 2048,
    "tie_embeddings": False,
    "share_embeddings": False,
    "skip_padding": True,
    "decoder_layers": None,
    "embedding_scale": None,
    "position_layout": "interleaved",
    "position_offset": 0,
    "embedding_layer_norm": False,
    "logits_bias": False,
    "source_start": True,
}

# Name -> what the option does, in one line: the help of its flag and config key.
MODEL_OPTION_HELP = {
    "max_length": "longest source or target sequence the model accepts",
    "tie_embeddings": "the target embedding matrix (transposed) is the output projection",
    "share_embeddings": "one embedding for source and target (vocabularies of equal size)",
    "skip_padding": "without XLA, training steps run the per-token layers on real tokens only",
    "decoder_layers": "blocks in the decoder, where they differ from the encoder's; unset: "
    "num_layers",
    "embedding_scale": "factor of the token embeddings; unset: sqrt(d_model), the paper's",
    "position_layout": "positions: sinusoidal interleaved (the paper's sine, cosine pairs), "
    "halves (the sines, then the cosines: Marian's) or fairseq (M2M-100's, NLLB's), or "
    "learned (mBART's)",
    "position_offset": "position t reads row t + offset of the positions (fairseq's models: 2)",
    "embedding_layer_norm": "a layer norm after the embeddings and positions (mBART's "
    "layernorm_embedding)",
    "logits_bias": "a learned bias per target id after the tied output projection (Marian's "
    "final logits bias)",
    "source_start": "the encoder reads the source's [START]; false: it starts at the first "
    "word (Marian's sources have no start token)",
}

# Options that change how a training step computes, not the model it trains: they
# stay out of a run's config.json "model", so a run may resume with them switched.
STEP_OPTIONS = ("hashed_dropout", "chunk_queries", "skip_padding")
