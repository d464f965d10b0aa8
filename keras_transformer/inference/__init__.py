"""In-graph searches over a trained model's decoding step: greedy, beam and sampling,
and the sub-batches a translator runs them in."""
