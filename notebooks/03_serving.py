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
# # Serving the exported SavedModel
#
# An export of `keras_transformer` is a plain TensorFlow SavedModel: strings in, translations
# out, the tokenizers and the decoding loops inside. Loading and calling it needs TensorFlow
# and tensorflow-text only, which is what TF Serving runs. This notebook loads it without
# `keras_transformer`, inspects its signatures, calls them on awkward input, and builds the
# REST and gRPC requests TF Serving expects (no server is started).
#
# It uses the export of notebook 02 (`KT_NOTEBOOK_WORKDIR/saved_models/demo`, or `demo_quick`
# with `KT_NOTEBOOK_QUICK=1`), or any export given as `KT_SERVING_MODEL`. When there is none,
# the setup cell trains and exports one first.

# %%
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

QUICK = os.environ.get("KT_NOTEBOOK_QUICK") == "1"
WORKDIR = Path(os.environ.get("KT_NOTEBOOK_WORKDIR", "../runs/notebooks")).resolve()
NAME = "demo_quick" if QUICK else "demo"
MODEL_DIR = Path(os.environ.get("KT_SERVING_MODEL", WORKDIR / "saved_models" / NAME)).resolve()


def versions(model_dir: Path) -> list[Path]:
    """The model's version directories (TF Serving layout: MODEL_DIR/<integer>/)."""
    if not model_dir.is_dir():
        return []
    found = [
        p for p in model_dir.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file()
    ]
    return sorted(found, key=lambda p: int(p.name))


print(MODEL_DIR, [p.name for p in versions(MODEL_DIR)])

# %% [markdown]
# ## Setup: create an export if there is none
# This is the only place `keras_transformer` is used, and it runs in a separate process
# (`keras-transformer demo`: train on the built-in corpus, export), so this kernel never
# imports the library. Quick mode trains a tiny model for a minute.

# %%
if not versions(MODEL_DIR):
    quick_flags = (
        "--demo-pairs 400 --num-layers 1 --d-model 32 --num-heads 2 --dff 64 --epochs 2 "
        "--vocab-size 300 --vocab-lower-thresh 1 --warmup-steps 50 --batch-size 32"
    ).split()
    command = [
        sys.executable, "-m", "keras_transformer_launcher", "demo", "--fit-verbose", "2",
        "--run-dir", str(WORKDIR / NAME), "--export-root", str(MODEL_DIR.parent),
        "--name", MODEL_DIR.name, "--examples", "2",
    ] + (quick_flags if QUICK else [])  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout[-2000:])
    if done.returncode:
        raise RuntimeError(f"setup failed:\n{done.stderr[-4000:]}")
assert versions(MODEL_DIR), f"no SavedModel under {MODEL_DIR}"

# %% [markdown]
# ## Load with TensorFlow alone
# `tensorflow_text` must be imported before loading: it registers the tokenizer ops the
# graph uses. TF Serving builds include them; plain `tensorflow_model_server` needs the
# tensorflow-text ops linked in (the `tensorflow/serving` images of matching versions do).

# %%
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402, F401

VERSION_DIR = versions(MODEL_DIR)[-1]
loaded = tf.saved_model.load(str(VERSION_DIR))
for name, function in loaded.signatures.items():
    print(f"{name}:\n  inputs  {function.structured_input_signature[1]}")
    print(f"  outputs {function.structured_outputs}")
assert set(loaded.signatures) == {
    "serving_default",
    "beam_search",
    "nbest",
    "greedy_with_prefix",
    "beam_search_with_prefix",
    "score",
}
for name in ("serving_default", "beam_search"):
    function = loaded.signatures[name]
    (spec,) = function.structured_input_signature[1].values()
    assert spec.dtype == tf.string and spec.shape.as_list() == [None]
    assert set(function.structured_outputs) == {"translation", "score", "source_truncated"}

# %% [markdown]
# The same from the command line: `saved_model_cli show --all --dir <VERSION_DIR>`.
#
# ## Call the signatures
# One batch with ordinary sentences, an empty string and bytes that are not UTF-8: every
# row gets an answer (the bytes are replaced by U+FFFD inside the graph).

# %%
texts = [
    b"Two thousand and twenty-six.",
    b"",
    b"One \xff\xfe two.",  # not UTF-8
    b"Seven hundred and three.",
]
outputs = {}
for name in ("serving_default", "beam_search"):
    result = loaded.signatures[name](text=tf.constant(texts))
    outputs[name] = result
    print(name)
    for text, translation, score in zip(
        texts, result["translation"].numpy(), result["score"].numpy(), strict=True
    ):
        print(f"  {score:8.3f}  {text!r} -> {translation.decode('utf-8')!r}")
    # One row out per row in; scores are log-probabilities.
    assert result["translation"].shape == result["score"].shape == (len(texts),)
    assert all(-1e4 < s <= 0 for s in result["score"].numpy())

# %% [markdown]
# Batching does not change a row's answer: padding a short source to the batch's length is
# masked everywhere. Each row translated alone gives the same translation and score.

# %%
for name, result in outputs.items():
    for i, text in enumerate(texts):
        alone = loaded.signatures[name](text=tf.constant([text]))
        assert alone["translation"].numpy()[0] == result["translation"].numpy()[i], (name, i)
        assert abs(float(alone["score"][0]) - float(result["score"][i])) < 1e-3, (name, i)
print("batched == one at a time")

# %% [markdown]
# The other signatures: each row's k best translations by beam search (the first is
# `beam_search`'s), a translation that continues a given target prefix, and the score of a
# given translation (its log-probability, as the translating signatures report theirs).

# %%
nbest = loaded.signatures["nbest"](text=tf.constant(texts), num_hypotheses=tf.constant(2))
assert nbest["translations"].shape == nbest["scores"].shape == (len(texts), 2)
assert nbest["translations"].numpy()[:, 0].tolist() == (
    outputs["beam_search"]["translation"].numpy().tolist()
)
greedy = outputs["serving_default"]["translation"].numpy()
prefixes = [t.split(b" ")[0] for t in greedy]  # each translation's first word
prefixed = loaded.signatures["greedy_with_prefix"](
    text=tf.constant(texts), prefix=tf.constant(prefixes)
)
for prefix, translation in zip(prefixes, prefixed["translation"].numpy(), strict=True):
    assert translation.startswith(prefix), (prefix, translation)
scored = loaded.signatures["score"](source=tf.constant(texts), target=tf.constant(greedy))
for text, translation, score in zip(texts, greedy, scored["score"].numpy(), strict=True):
    print(f"  {score:8.3f}  {text!r} -> {translation.decode('utf-8')!r}")
assert all(-1e4 < s <= 0 for s in scored["score"].numpy())

# %% [markdown]
# Nothing of `keras_transformer` was needed in this kernel:

# %%
print("keras_transformer imported:", "keras_transformer" in sys.modules)
assert "keras_transformer" not in sys.modules

# %% [markdown]
# ## REST: the request bodies TF Serving expects
# `POST http://HOST:8501/v1/models/<name>[/versions/<version>]:predict`. The columnar form
# (`inputs`) gives columnar answers; the row form (`instances`) one object per row. JSON is
# UTF-8 text, so bytes that are not UTF-8 travel base64-encoded as `{"b64": ...}`.


# %%
def rest_value(text: bytes):
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(text).decode("ascii")}


url = f"http://localhost:8501/v1/models/{MODEL_DIR.name}:predict"
columnar = {"signature_name": "serving_default", "inputs": {"text": [rest_value(t) for t in texts]}}
rows = {"signature_name": "beam_search", "instances": [rest_value(t) for t in texts]}
print("POST", url)
print(json.dumps(columnar, ensure_ascii=False))
print(json.dumps(rows, ensure_ascii=False))

# What the server sends back for the columnar request, filled with the local answers:
answer = {
    "outputs": {
        "translation": [
            t.decode("utf-8") for t in outputs["serving_default"]["translation"].numpy()
        ],
        "score": outputs["serving_default"]["score"].numpy().tolist(),
    }
}
print(json.dumps(answer, ensure_ascii=False))

# The bodies are valid JSON and carry every input byte for byte.
sent = json.loads(json.dumps(columnar))["inputs"]["text"]
decoded = [base64.b64decode(v["b64"]) if isinstance(v, dict) else v.encode() for v in sent]
assert decoded == texts

# %% [markdown]
# With a server running (see `saved_models/README.md`), send it with e.g.
# `requests.post(url, json=columnar).json()["outputs"]["translation"]`.
#
# ## gRPC: the PredictRequest
# Port 8500. `tensorflow-serving-api` (its version matching TensorFlow's) provides the
# protos; strings travel as raw bytes in a `TensorProto`, so no base64 is needed.

# %%
from tensorflow_serving.apis import predict_pb2  # noqa: E402

request = predict_pb2.PredictRequest()
request.model_spec.name = MODEL_DIR.name
request.model_spec.signature_name = "beam_search"  # or "serving_default"
request.inputs["text"].CopyFrom(tf.make_tensor_proto(texts, dtype=tf.string))
print(request)
wire = request.SerializeToString()
again = predict_pb2.PredictRequest.FromString(wire)
assert tf.make_ndarray(again.inputs["text"]).tolist() == texts
print(f"{len(wire)} bytes on the wire")

# %% [markdown]
# Sending it:
#
# ```python
# import grpc
# from tensorflow_serving.apis import prediction_service_pb2_grpc
#
# stub = prediction_service_pb2_grpc.PredictionServiceStub(
#     grpc.insecure_channel("localhost:8500"))
# response = stub.Predict(request, timeout=30.0)
# translations = [t.decode() for t in tf.make_ndarray(response.outputs["translation"])]
# ```
#
# The response's `outputs` map holds `translation` (DT_STRING), `score` (DT_FLOAT) and
# `source_truncated` (DT_BOOL: the source was cut at the export's source limit) tensors, one
# entry per input row, like the local call above.
