"""Training under `tf.distribute`: strategy selection and a correct global loss.

`get_strategy(name)` picks TensorFlow's distribution engine by name:

- `"default"`: no distribution (one device, the default strategy).
- `"mirrored"`: `MirroredStrategy`, every GPU (or the CPU) of this machine.
- `"multi_worker"`: `MultiWorkerMirroredStrategy`, synchronous training over
  several machines described by the `TF_CONFIG` environment variable.
- `"tpu"`: `TPUStrategy` on the TPU named by `tpu` (or found automatically).

Build the model, optimizer and `compile` inside `strategy.scope()` and pass
the *global* batch to `fit`; Keras splits each batch between the replicas.

The masked loss must be the mean over every real target token of the global
batch, not the mean of each replica's mean: replicas hold different numbers of
padding tokens, so the mean of means over-weights replicas with short
sentences. `global_token_mean` divides each replica's loss sum by the
all-reduced count of real tokens; Keras then sums the replicas' gradients,
which gives the gradient of the global token mean.

Strategies are TensorFlow's: on the JAX and PyTorch backends only "default"
runs (one device, `OneDevice`).
"""

import contextlib

from keras import ops

from keras_transformer.layers import backend

if backend.ON_TENSORFLOW:
    import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


class OneDevice:
    """The "default" strategy of the JAX and PyTorch backends: no distribution."""

    def scope(self):
        return contextlib.nullcontext()


def get_strategy(name: str = "default", tpu: str | None = None):
    """Returns the `tf.distribute.Strategy` called `name` (one of `STRATEGIES`).

    Args:
        name: "default", "mirrored", "multi_worker" or "tpu".
        tpu: TPU name or gRPC address for "tpu"; None or "" lets the cluster
            resolver find the TPU attached to this VM (Cloud TPU VMs, Colab).

    Raises:
        ValueError: for an unknown name, or a strategy other than "default" on
            a backend other than TensorFlow.
    """
    if not backend.ON_TENSORFLOW and name in STRATEGIES:
        if name == "default":
            return OneDevice()
        raise ValueError(
            f"The {name!r} strategy is TensorFlow's (tf.distribute); the Keras backend "
            f"here is {backend.BACKEND!r}. Use strategy 'default', or KERAS_BACKEND=tensorflow."
        )
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        # Reads TF_CONFIG; every worker runs the same program.
        return _MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(
        f"Unknown distribution strategy. Expected one of {STRATEGIES}. Received: name={name!r}"
    )


def num_workers(strategy) -> int:
    """The machines `strategy` trains on: the workers (and chief) of its cluster, or 1."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not backend.ON_TENSORFLOW or resolver is None:
        return 1
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    spec = resolver.cluster_spec()
    return sum(spec.num_tasks(job) for job in ("chief", "worker") if job in spec.jobs) or 1


class _MultiWorkerMirroredStrategy(
    tf.distribute.MultiWorkerMirroredStrategy if backend.ON_TENSORFLOW else object
):
    """MultiWorkerMirroredStrategy whose `reduce` works the way Keras calls it.

    Keras 3.15's `fit` under this strategy (1) reduces the first batch, a
    nested `((context, target_in), target_out)`, in one `strategy.reduce` call
    to build the model symbolically, which the collective implementation
    rejects (and MEAN turns the integer ids into floats), and (2) reduces each
    scalar metric with `axis=0`, which fails on a scalar. Reducing leaf by
    leaf, with no axis for scalars, in the leaf's own dtype, makes `fit` run.
    A batch of ids is not reduced at all: the build needs only its shape and
    dtype, and workers reading their own shards hold batches of other shapes,
    which a collective refuses.
    """

    def reduce(self, reduce_op, value, axis):
        def reduce_leaf(leaf):
            local = self.experimental_local_results(leaf)[0]
            if local.dtype.is_integer and local.shape.rank:  # ids: this worker's own
                return local
            leaf_axis = None if local.shape.rank == 0 else axis
            parent = super(_MultiWorkerMirroredStrategy, self)
            return tf.cast(parent.reduce(reduce_op, leaf, leaf_axis), local.dtype)

        return tf.nest.map_structure(reduce_leaf, value)


def shard_by_data(dataset):
    """Marks `dataset` to be split between workers batch by batch.

    Keras distributes a dataset passed to `fit` with
    `experimental_distribute_dataset`, which cuts each global batch into one
    slice per replica. Across workers tf.data would first try to give each
    worker its own input files; our pipelines read one corpus file (or
    in-memory tensors), so sharding by data is the right policy and avoids
    that failed attempt.
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def global_token_mean(loss_sum, token_count):
    """`loss_sum / (real tokens in the global batch)`, for this replica's part.

    In a replica context with several replicas the token count is summed over
    all replicas (an all-reduce), so that the replicas' contributions add up to
    the global token mean when Keras sums their gradients. Keras does not
    rescale a scalar loss (it only divides non-scalar, per-sample losses by
    the number of replicas), so nothing has to be compensated here; the
    two-worker test in tests/test_distribute.py pins this down.

    Outside a replica context (e.g. Keras' symbolic build in the strategy
    scope), with one replica and on the other backends it is the plain local mean.
    """
    token_count = ops.cast(token_count, loss_sum.dtype)
    context = tf.distribute.get_replica_context() if backend.ON_TENSORFLOW else None
    if context is not None and context.num_replicas_in_sync > 1:
        token_count = context.all_reduce(tf.distribute.ReduceOp.SUM, token_count)
    return ops.divide_no_nan(loss_sum, token_count)
