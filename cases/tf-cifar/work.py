"""The work of tf-cifar's training step and what its devices can do, for the record's utilisation:
FLOPs per image counted by TensorFlow's profiler over the model's forward graph (its convolutions and
matrix products, as MLPerf counts a model's FLOPs), times 3 for forward and backward; and the best
rate of large matrix products on this process's first device, measured before the first epoch by the
timing every case shares (suite/instack/matmul_peak.py)."""

import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from suite.instack.matmul_peak import largest_side, measure
from suite.instack.model_flops import cached

PROFILED = ("tf.compat.v1.profiler float operations (Conv2D, MatMul) of the model's forward graph at the run's "
            "image size, x 3 for forward and backward")
COUNTED_OPS = ("Conv2D", "MatMul", "BatchMatMulV2", "DepthwiseConv2dNative")


def report_work(probe, build_model, model_name: str, image_size: int, classes: int, place) -> None:
    """Hands the step's FLOPs per image and this process's measured matmul peak per device to the probe."""
    key = {"case": "tf-cifar", "model": model_name, "image_size": image_size, "classes": classes,
           "tensorflow": tf.__version__}
    forward, from_cache = cached(key, lambda: forward_flops(build_model, image_size, classes))
    precision = matmul_precision(place.device_type)
    probe.work(flops_per_sample=3 * forward, source=PROFILED + (" (cached)" if from_cache else ""),
               precision=precision)
    # On a CPU the process's replicas (logical devices) share its cores: its rate per device.
    shared_by = place.local_replicas if place.device_type == "cpu" else 1
    probe.measured_peak(**matmul_peak("/gpu:0" if place.device_type == "cuda" else "/cpu:0", precision, shared_by))


def forward_flops(build_model, image_size: int, classes: int) -> int:
    """FLOPs of one image through a fresh copy of the model (built outside the strategy), by op type."""
    model = build_model(weights=None, include_top=True, classes=classes, input_shape=(image_size, image_size, 3))
    function = tf.function(lambda x: model(x, training=False))
    graph = convert_variables_to_constants_v2(function.get_concrete_function(
        tf.TensorSpec([1, image_size, image_size, 3], tf.float32))).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder(
        tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()).with_empty_output().build()
    found = tf.compat.v1.profiler.profile(graph=graph, run_meta=tf.compat.v1.RunMetadata(), cmd="op", options=options)
    return sum(op.total_float_ops for op in found.children if op.name in COUNTED_OPS)


def matmul_precision(device_type: str) -> str:
    """float32 products on a GPU are tf32 where this process lets TensorFloat-32 in
    (tf.config.experimental.enable_tensor_float_32_execution; on by default) and the GPU has it (Ampere
    on; not ROCm's), else fp32."""
    if device_type != "cuda" or not tf.config.experimental.tensor_float_32_execution_enabled():
        return "fp32"
    if tf.test.is_built_with_rocm():
        return "fp32"
    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    return "tf32" if details.get("compute_capability", (0, 0))[0] >= 8 else "fp32"


def matmul_peak(device: str, precision: str, shared_by: int, seconds: float | None = None) -> dict:
    """The measured matmul peak (suite/instack/matmul_peak.py) of float32 tf.linalg.matmul on `device`,
    under this process's TensorFloat-32 setting (the one its model's products run under)."""

    def square(n: int):
        with tf.device(device):
            return tf.random.uniform((n, n))

    def multiply(a, times: int) -> None:
        with tf.device(device):
            for _ in range(times):
                out = tf.linalg.matmul(a, a)
            out[0, 0].numpy()  # the products run in order on the device: the last one done, all are

    largest = largest_side(device.startswith("/gpu"))
    return measure(square, multiply, precision, largest, shared_by=shared_by, seconds=seconds)
