"""Where an exported translator's decoding step goes: ops per step, time per op kind.

    PYTHONPATH=. python benchmarks/profile_decode.py SAVED_MODEL --source test.pt \
        [--sentences 64] [--signature serving_default|beam_search]

1. Ops per step: the nodes of the search loop's body in the signature's graph, by op
   type. The body of the innermost `while` loop is one decoding step (the loop around
   it walks the sub-batches); of a search's two step loops, one per attention form,
   the larger is counted.
2. Time per op kind: one call on the first `--sentences` sentences as one batch,
   traced by TensorFlow's profiler (host tracer); self time summed by op type over the
   call (the profiler's framework_op_stats), with the number of executions. Tracing
   adds overhead per op, so the shares matter more than the totals.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import tempfile
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

LOOP_OPS = {"While", "StatelessWhile"}
# Nodes that cost no kernel work: constants, identities, loop plumbing.
FREE_OPS = {"Const", "Identity", "IdentityN", "NoOp", "_Arg", "_Retval"}


def _called_functions(node) -> list[str]:
    """Names of the functions a node runs: a loop's cond and body, a conditional's
    branches, a call's function."""
    names = []
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return names


def step_ops(signature) -> collections.Counter:
    """Op types of the innermost while-loop body in `signature`'s graph: a loop body
    that runs no loop itself, directly or through the functions it calls (a search's
    step loops sit in the branches of a conditional, inside the sub-batch loop). Of
    several, the largest: a search traces one step loop per attention form."""
    graph_def = signature.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    runs_loop: dict[str, bool] = {}

    def has_loop(name: str) -> bool:
        if name not in runs_loop:
            runs_loop[name] = False  # a recursive reference adds no loop
            runs_loop[name] = any(
                node.op in LOOP_OPS or any(has_loop(f) for f in _called_functions(node))
                for node in library[name].node_def
                if node.op in LOOP_OPS or _called_functions(node)
            )
        return runs_loop[name]

    node_lists = [graph_def.node] + [f.node_def for f in library.values()]
    bodies = [
        library[node.attr["body"].func.name]
        for nodes in node_lists
        for node in nodes
        if node.op in LOOP_OPS
    ]
    innermost = [body for body in bodies if not has_loop(body.signature.name)]
    if not innermost:
        raise SystemExit("profile_decode.py: no while loop in this signature")
    body = max(innermost, key=lambda f: len(f.node_def))
    return collections.Counter(node.op for node in body.node_def)


def op_time_by_type(signature, batch) -> list[dict]:
    """Self time per op type over one call of `signature` (TensorFlow's profiler)."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin

    signature(text=batch)  # warm-up: nothing traced below is first-call work
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        signature(text=batch)["translation"].numpy()
        wall = time.perf_counter() - start
        tf.profiler.experimental.stop()
        planes = glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb")
        data, ok = _pywrap_profiler_plugin.xspace_to_tools_data(planes, "framework_op_stats", {})
    if not ok:
        raise SystemExit("profile_decode.py: the profiler returned no op statistics")
    table = json.loads(data)[0]  # Google DataTable JSON: "cols" and "rows"
    names = [col["id"] for col in table["cols"]]
    rows = [
        dict(zip(names, [cell["v"] for cell in row["c"]], strict=False)) for row in table["rows"]
    ]
    by_type: dict[str, dict] = {}
    for row in rows:
        entry = by_type.setdefault(row["type"], {"type": row["type"], "us": 0.0, "count": 0})
        entry["us"] += float(row["total_self_time"])
        entry["count"] += int(row["occurrences"])
    print(f"one traced call: {wall:.2f} s wall")
    return sorted(by_type.values(), key=lambda e: -e["us"])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved_model", help="an export (a version directory or its parent)")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--top", type=int, default=15, help="op types listed by time")
    args = parser.parse_args(argv)

    from keras_transformer.inference.export import latest_version_dir

    path = latest_version_dir(args.saved_model)
    signature = tf.saved_model.load(str(path)).signatures[args.signature]
    ops = step_ops(signature)
    working = {op: n for op, n in ops.items() if op not in FREE_OPS}
    print(f"{path} {args.signature}: {sum(ops.values())} nodes per decoding step, ")
    print(f"{sum(working.values())} of them kernels (not {', '.join(sorted(FREE_OPS))}):")
    print("  " + ", ".join(f"{op} {n}" for op, n in sorted(working.items(), key=lambda x: -x[1])))

    with open(args.source, encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for _, line in zip(range(args.sentences), f, strict=False)]
    stats = op_time_by_type(signature, tf.constant(sentences))
    total = sum(e["us"] for e in stats)
    print(f"\nself time by op type, {len(sentences)} sentences in one call ({total / 1e3:.0f} ms):")
    print(f"{'op type':<28} {'ms':>9} {'share':>7} {'executions':>11}")
    for entry in stats[: args.top]:
        print(
            f"{entry['type']:<28} {entry['us'] / 1e3:>9.1f} {entry['us'] / total:>6.1%} "
            f"{entry['count']:>11}"
        )


if __name__ == "__main__":
    main()
