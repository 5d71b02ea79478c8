"""tf-cifar: ResNet50V2 (or ResNet152V2, or the PyTorch cases' ResNet-50 v1.5 or ResNet-18) on CIFAR-10 with
tf.distribute.

One process with MirroredStrategy over the node's devices (logical CPU devices on a CPU-only node),
or one process per node with MultiWorkerMirroredStrategy when TF_CONFIG is set (suite/launchers/tfdist.py).
The model and training loop are Keras 2 (tf_keras): Keras 3's fit() fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585), and both strategies should run the same code.
"""

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import cifar
import keras_resnet
import numpy
import pipeline
import tensorflow as tf
import tf_keras as keras
from work import report_work

from suite.instack.case_options import parse_case_args
from suite.instack.cpu_binding import bind_cpus
from suite.instack.probe import Probe, announce
from suite.instack.tf_cluster import make_strategy, worker_rank

MODELS = {"resnet50v2": keras.applications.ResNet50V2, "resnet152v2": keras.applications.ResNet152V2,
          "resnet50-v1.5": keras_resnet.resnet50_v15, "resnet18": keras_resnet.resnet18}


def fail(message: str) -> None:
    print(f"tf-cifar: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


@dataclass
class Place:
    """Where this process stands in the run."""

    strategy: tf.distribute.Strategy
    strategy_name: str
    rank: int
    workers: int
    device_type: str
    device_name: str
    processes_on_host: int
    threads: dict

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def local_replicas(self) -> int:
        return self.replicas // self.workers


def configure_threads() -> dict:
    """This process's share of the machine's cores (bound to it with --cpu-bind), so that the case
    processes of one machine do not oversubscribe it."""
    intra = bind_cpus()
    cores = len(os.sched_getaffinity(0))
    # Collectives and the replicas of one process run side by side in the inter-op pool: at least 2.
    inter = max(2, intra // 2)
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    return {"intra_op_threads": intra, "inter_op_threads": inter, "cores": cores}


def place_this_process() -> Place:
    """Threads first, then the strategy: TensorFlow takes both settings only before it starts."""
    tf_config = json.loads(os.environ["TF_CONFIG"]) if os.environ.get("TF_CONFIG") else None
    rank, workers = worker_rank(tf_config)
    processes_on_host = int(os.environ.get("SUITE_PROCESSES_ON_HOST", "1"))
    threads = configure_threads()
    per_node = int(os.environ.get("SUITE_DEVICES_PER_NODE", "1"))
    try:
        strategy, name, device_type, device_name = make_strategy(tf_config is not None, per_node)
    except ValueError as exc:
        fail(str(exc))
    return Place(strategy, name, rank, workers, device_type, device_name, processes_on_host, threads)


class EpochProbe(keras.callbacks.Callback):
    """Times each epoch for the probe; Keras has finished the epoch's steps when it hands over the logs."""

    def __init__(self, probe: Probe, images_per_epoch: int, epochs: int):
        super().__init__()
        self.probe, self.images, self.epochs = probe, images_per_epoch, epochs

    def on_epoch_begin(self, epoch, logs=None):
        self.probe.epoch_begin()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.probe.epoch_end(images=self.images, total=self.epochs, loss=float(logs["loss"]),
                             accuracy=float(logs["accuracy"]))


def build_model(args, replicas: int) -> tuple[keras.Model, float]:
    model = MODELS[args.model](weights=None, include_top=True, classes=args.num_classes,
                               input_shape=(args.image_size, args.image_size, 3))
    lr = args.base_lr * replicas
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model, lr


def load_data(global_batch: int, batch_size: int) -> tuple[cifar.Cifar, Path]:
    folder = Path(os.environ.get("SUITE_DATA_DIR", "data")) / cifar.FOLDER
    try:
        data = cifar.load(folder)
    except cifar.DataError as exc:
        fail(str(exc))
    if len(data.train.labels) < global_batch:
        fail(f"{len(data.train.labels)} training images are fewer than one global batch of {global_batch} "
             f"(batch-size {batch_size} x replicas): lower --batch-size")
    return data, folder


def main() -> None:
    announce()
    args = parse_case_args(__file__)
    place = place_this_process()
    strategy, replicas, workers = place.strategy, place.replicas, place.workers
    global_batch = args.batch_size * replicas
    print(f"worker {place.rank} of {workers}: {place.strategy_name}, {replicas} replica(s) in sync, "
          f"{place.local_replicas} in this process, {place.threads['intra_op_threads']} thread(s) per op", flush=True)

    data, folder = (None, None) if args.synthetic_input and args.steps_per_epoch else \
        load_data(global_batch, args.batch_size)
    # Full batches only: every replica does the same work.
    steps = args.steps_per_epoch or len(data.train.labels) // global_batch
    cache = data is not None and pipeline.cache_fits(len(data.train.labels) // workers, args.image_size,
                                                     place.processes_on_host)
    if args.synthetic_input:
        train = strategy.distribute_datasets_from_function(lambda ctx: pipeline.synthetic(
            args.image_size, args.batch_size, args.num_classes))
    else:
        train = strategy.distribute_datasets_from_function(lambda ctx: pipeline.training(
            data.train, args.image_size, args.batch_size, cache, args.shuffle_buffer, context=ctx))
    with strategy.scope():
        model, lr = build_model(args, replicas)

    probe = Probe(place.rank, workers)
    probe.start(
        config={
            "model_name": args.model, "data": "synthetic" if args.synthetic_input else data.source,
            "data_path": str(folder) if data else None,
            "data_files_sha256": cifar.fingerprints(folder) if data and place.rank == 0 else None,
            "train_images": len(data.train.labels) if data else None,
            "test_images": len(data.test.labels) if data else None,
            "batch_per_device": args.batch_size, "global_batch": global_batch, "image_size": args.image_size,
            "dtype": "float32", "device_type": place.device_type, "device_name": place.device_name,
            "strategy": place.strategy_name, "workers": workers, "replicas": replicas,
            # As PyTorch counts: batch normalisation's moving statistics are not parameters there.
            "parameters": keras_resnet.parameter_count(model),
            "parameters_non_trainable": model.count_params() - keras_resnet.parameter_count(model),
            "classes": args.num_classes, "lr": lr, "steps_per_epoch": steps,
            "images_per_epoch": steps * global_batch, "cache_resized": cache, **place.threads,
        },
        versions={"tensorflow": tf.__version__, "tf_keras": keras.__version__, "numpy": numpy.__version__,
                  "cuda": tf.sysconfig.get_build_info().get("cuda_version") if place.device_type == "cuda" else None},
    )
    report_work(probe, MODELS[args.model], args.model, args.image_size, args.num_classes, place)
    callback = EpochProbe(probe, steps * args.batch_size * place.local_replicas, args.epochs)
    model.fit(train, epochs=args.epochs, steps_per_epoch=steps, callbacks=[callback],
              verbose=2 if place.rank == 0 else 0)
    if data:
        test_model(model, data, strategy, args, probe, global_batch)
    probe.end()


def test_model(model, data: cifar.Cifar, strategy, args, probe: Probe, global_batch: int) -> None:
    test = strategy.distribute_datasets_from_function(lambda ctx: pipeline.evaluation(
        data.test, args.image_size, args.batch_size, context=ctx))
    eval_steps = max(1, len(data.test.labels) // global_batch)
    scores = model.evaluate(test, steps=eval_steps, return_dict=True, verbose=0)
    evaluated = eval_steps * global_batch
    probe.result(test_accuracy=float(scores["accuracy"]), test_loss=float(scores["loss"]),
                 test_images_evaluated=evaluated)
    print(f"test accuracy {scores['accuracy']:.4f} on {evaluated} images", flush=True)


if __name__ == "__main__":
    main()
