"""The built-in demo: a model small enough to learn numbers-as-words in minutes on a CPU."""

DEMO_SETTINGS = {
    "corpus": "demo",
    "demo_pairs": 20000,
    "num_layers": 2,
    "d_model": 128,
    "num_heads": 4,
    "dff": 256,
    "dropout_rate": 0.1,
    "max_tokens": 48,
    "batch_size": 64,
    "warmup_steps": 500,
    "epochs": 4,
    "vocab_size": 2000,
}
