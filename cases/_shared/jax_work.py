"""What a JAX case's compiled step does and what its device can do, measured before the timed window (both
jax cases'): XLA's FLOP count of the compiled program, the arithmetic of its products, the
device's measured matmul peak (suite/instack/matmul_peak.py, as every case's is) and its peak memory; and
the end of a run: its losses and every process's peak memory recorded, then the end line.
JAX is imported inside the functions: the module is imported after cases/_shared/jax_dist.py set JAX up."""

from cases._shared.resident_memory import peak_resident, reset_peak_resident
from suite.instack.matmul_peak import largest_side, measure

FIRST_LOSSES = 20  # steps whose loss the record lists one by one


def xla_flops(compiled) -> float:
    """FLOPs of one run of the compiled (per-device) program, as XLA's cost analysis counts them."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax: one dict per program
        cost = cost[0]
    return float(cost["flops"])


def precision_of(wanted: str, platform: str, device) -> str:
    """The arithmetic of the step's products as the run set it: bf16; float32 is tf32 on an NVIDIA GPU of
    compute capability 8 or later where jax_default_matmul_precision lets XLA use TF32 (its default), else fp32."""
    import jax

    if wanted == "bf16":
        return "bf16"
    if platform != "gpu":
        return "fp32"
    setting = str(jax.config.jax_default_matmul_precision or "default").lower()
    capability = float(getattr(device, "compute_capability", "0") or 0)
    return "tf32" if capability >= 8 and setting in ("default", "tensorfloat32", "bfloat16_3x", "fastest") else "fp32"


def record_matmul_peak(probe, device, wanted: str, platform: str) -> None:
    """The device's measured matmul peak, recorded; then, on a CPU, the peak resident set reset, so that the
    peak memory recorded at the end is the training's, not the measurement's buffers'."""
    probe.measured_peak(**matmul_peak(device, wanted, platform))
    if platform == "cpu":
        reset_peak_resident()


def matmul_peak(device, wanted: str, platform: str) -> dict:
    """The measured matmul peak of this process's device in jnp.matmul at the step's arithmetic."""
    import jax
    import jax.numpy as jnp

    dtype = jnp.bfloat16 if wanted == "bf16" else jnp.float32
    mm = jax.jit(lambda a: a @ a)

    def square(n: int):
        return jax.device_put(jax.random.normal(jax.random.PRNGKey(n), (n, n), dtype=jnp.float32).astype(dtype), device)

    def multiply(a, times: int) -> None:
        out = None
        for _ in range(times):
            out = mm(a)
        out.block_until_ready()

    return measure(square, multiply, wanted, largest_side(platform == "gpu"))


def peak_memory(device) -> tuple[int, str]:
    """The device's peak bytes in use (GPU: XLA's allocator, over the whole process: it has no reset), or the
    process's peak resident set on a CPU (cases/_shared/resident_memory.py)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        return int(stats["peak_bytes_in_use"]), "XLA's allocator: peak_bytes_in_use of the device since the start"
    return peak_resident()


def all_peak_memory(device) -> tuple[list[int], str]:
    """Every process's peak memory (a collective: every process calls it)."""
    import numpy as np
    from jax.experimental import multihost_utils

    memory, basis = peak_memory(device)
    everyone = multihost_utils.process_allgather(np.asarray([memory], dtype=np.int64)).reshape(-1)
    return [int(m) for m in everyone], basis


def report_end(probe, losses: list, device) -> None:
    """Every step's loss (the mean over the step's global batch, over all devices) and each process's peak
    memory, then the end line (a collective: every process calls it)."""
    import jax

    means = [round(float(v), 6) for v in jax.device_get(losses)]
    memory, basis = all_peak_memory(device)
    probe.result(first_step_loss=means[0], last_step_loss=means[-1], first_losses=means[:FIRST_LOSSES],
                 steps=len(means), peak_memory_bytes=memory, peak_memory_basis=basis)
    probe.end()


def versions() -> dict:
    import flax
    import jax
    import numpy as np
    import optax

    return {"jax": jax.__version__, "jaxlib": _version("jaxlib"), "flax": flax.__version__,
            "optax": optax.__version__, "numpy": np.__version__}


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
