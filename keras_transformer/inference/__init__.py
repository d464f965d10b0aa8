"""Inference, above the model: the in-graph searches (greedy and sampling in
`sampling.py`, beam in `beam.py`, their shared interface in `search.py`), the
`BatchDecoder` that runs them over batches of ids within a length policy and a bound
on rows (`batch_decoding.py`, with the loop in `sub_batches.py`), the `Translator`
(strings in, strings out: `translator.py`) and its SavedModel export (`export.py`).
Everything here runs in TensorFlow graphs."""
