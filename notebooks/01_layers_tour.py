# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A tour of the layers
#
# Each concept of "Attention Is All You Need", shown with `keras_transformer`'s own code
# (nothing here is re-implemented): the positional encoding and its properties, scaled
# dot-product attention, the padding and look-ahead masks, and one encoder and decoder layer.

# %%
import matplotlib.pyplot as plt
import numpy as np

import keras_transformer as kt
from keras_transformer import plotting
from keras_transformer.layers import causal_mask, padding_mask

# %% [markdown]
# ## Positional encoding
# `PE(pos, 2i) = sin(pos / 10000^(2i/d))`, `PE(pos, 2i+1) = cos(pos / 10000^(2i/d))`.

# %%
plotting.plot_positional_encoding(length=128, depth=128)
plt.show()

# %% [markdown]
# Every position has the same norm, `sqrt(d/2)`: the encoding adds position without
# changing the scale of the embedding.

# %%
encoding = kt.positional_encoding(length=256, depth=64)
norms = np.linalg.norm(encoding, axis=1)
print(f"norms: min {norms.min():.6f} max {norms.max():.6f}, sqrt(d/2) = {np.sqrt(32):.6f}")
assert np.allclose(norms, np.sqrt(32), atol=1e-4)

# %% [markdown]
# Shifting by `k` positions is the same rotation for every position: each (sin, cos) pair
# turns by the angle `k * w_i`. That is why the model can learn to attend by relative
# position.

# %%
k, depth = 7, 64
rotation = np.zeros((depth, depth))
for i in range(depth // 2):
    angle = k / 10000 ** (2 * i / depth)
    rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [
        [np.cos(angle), np.sin(angle)],
        [-np.sin(angle), np.cos(angle)],
    ]
error = np.abs(encoding[:-k] @ rotation.T - encoding[k:]).max()
print(f"max |R_k PE(p) - PE(p + k)| = {error:.2e}")
assert error < 1e-4

# %% [markdown]
# ## Masks
# Both masks are booleans where True means "may attend". They are built from token ids
# (id 0 is padding) and passed explicitly to every attention call.

# %%
ids = np.array([[5, 8, 13, 0, 0]])
print("padding mask:", padding_mask(ids).numpy().astype(int))
print("look-ahead (causal) mask:\n", causal_mask(5, 5).numpy().astype(int))

# %% [markdown]
# ## Scaled dot-product attention
# `softmax(Q K^T / sqrt(d_k)) V` per head. Padded keys get exactly zero weight.

# %%
attention = kt.GlobalSelfAttention(d_model=16, num_heads=4, dropout_rate=0.0)
x = np.random.default_rng(0).normal(size=(1, 5, 16)).astype("float32")
_, weights = attention(x, padding_mask=padding_mask(ids), return_attention_scores=True)
print("weights shape (batch, heads, queries, keys):", weights.shape)
print("weight on padded keys:", weights.numpy()[..., 3:].max())
assert weights.numpy()[..., 3:].max() == 0.0
plotting.plot_attention_heads(
    weights[0].numpy(), ["5", "8", "13", "pad", "pad"], ["5", "8", "13", "pad", "pad"]
)
plt.show()

# %% [markdown]
# The causal self-attention of the decoder never looks ahead: its weights are lower
# triangular.

# %%
causal = kt.CausalSelfAttention(d_model=16, num_heads=4, dropout_rate=0.0)
_, causal_weights = causal(x, return_attention_scores=True)
print(np.round(causal_weights.numpy()[0, 0], 2))
assert np.allclose(np.triu(causal_weights.numpy()[0, 0], k=1), 0)

# %% [markdown]
# ## One encoder layer and one decoder layer

# %%
encoder_layer = kt.EncoderLayer(d_model=16, num_heads=4, dff=64)
decoder_layer = kt.DecoderLayer(d_model=16, num_heads=4, dff=64)
context = encoder_layer(x, padding_mask=padding_mask(ids))
target = np.random.default_rng(1).normal(size=(1, 3, 16)).astype("float32")
print("encoder layer:", x.shape, "->", context.shape)
print("decoder layer:", target.shape, "->", decoder_layer(target, context=context).shape)

# %% [markdown]
# ## The whole Transformer
# Padding appended to the source leaves the logits unchanged: the masks work through every
# layer (the original tutorial loses them from the second layer on under Keras 3).

# %%
model = kt.Transformer(
    num_layers=2, d_model=16, num_heads=4, dff=64, input_vocab_size=50, target_vocab_size=50
)
source = np.array([[5, 8, 13]])
target_in = np.array([[2, 9, 4]])
logits = model((source, target_in))
logits_padded = model((np.pad(source, ((0, 0), (0, 4))), target_in))
print("max change from padding:", np.abs(logits - logits_padded).max())
assert np.abs(logits - logits_padded).max() < 1e-5
model.summary()
