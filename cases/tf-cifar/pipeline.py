"""tf.data input pipelines for tf-cifar, arranged as the PRACE guide advises (section 5.5.2): a
parallel map for the resize, a cache of the resized images where they fit in memory, shuffle before
repeat, and prefetch as the last step."""

import tensorflow as tf
from cifar import Split

AUTOTUNE = tf.data.AUTOTUNE


def resized_bytes(count: int, image_size: int) -> int:
    """Memory of `count` images resized to image_size², kept as uint8."""
    return count * image_size * image_size * 3


def memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def cache_fits(count: int, image_size: int, processes_on_host: int) -> bool:
    """Cache when every process of this machine can hold its resized images in half the free memory."""
    available = memory_available()
    return available is not None and resized_bytes(count, image_size) * processes_on_host <= available // 2


def _resize(image_size: int):
    def resize(image, label):
        if image_size != image.shape[0]:
            image = tf.image.resize(image, (image_size, image_size))
            image = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
        return image, label

    return resize


def _scale(images, labels):
    # The [-1, 1] range ResNetV2 is trained with (keras.applications.resnet_v2.preprocess_input).
    return tf.cast(images, tf.float32) / 127.5 - 1.0, labels


def _resized(split: Split, image_size: int, context: tf.distribute.InputContext | None) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((split.images, split.labels))
    if context is not None and context.num_input_pipelines > 1:
        # Each worker resizes only its own share.
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
    return ds.map(_resize(image_size), num_parallel_calls=AUTOTUNE)


def training(split: Split, image_size: int, batch_per_replica: int, cache: bool, shuffle_buffer: int,
             seed: int = 42, context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """Endless shuffled batches of (images in [-1, 1], float32, NHWC; int32 labels)."""
    ds = _resized(split, image_size, context)
    if cache:
        ds = ds.cache()
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_per_replica, drop_remainder=True).map(_scale, num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def evaluation(split: Split, image_size: int, batch_per_replica: int,
               context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """Repeated so that every replica has as many full batches as the others (evaluate with steps=)."""
    ds = _resized(split, image_size, context).repeat()
    ds = ds.batch(batch_per_replica, drop_remainder=True).map(_scale, num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def synthetic(image_size: int, batch_per_replica: int, classes: int, seed: int = 42) -> tf.data.Dataset:
    """One fixed random batch repeated, already at its final size and range: training without any input
    work, to tell the input pipeline's cost from the model's (`--synthetic-input`)."""
    generator = tf.random.Generator.from_seed(seed)
    images = generator.uniform((batch_per_replica, image_size, image_size, 3), -1.0, 1.0)
    labels = generator.uniform((batch_per_replica,), 0, classes, dtype=tf.int32)
    return tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(AUTOTUNE)
