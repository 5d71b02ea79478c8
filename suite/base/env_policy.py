"""The one policy for environment variables of the runner: which ones steer frameworks and launchers
(recorded in every record, passed to processes on other hosts and into containers), and which look
like credentials (masked in records and dry runs, never passed on a command line)."""

import re
from collections.abc import Mapping

PREFIXES = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "NCCL_", "CUDA_", "CUDNN_", "NVIDIA_", "UCX_", "GLOO_", "HOROVOD_",
            "MXNET_", "DMLC_", "PS_", "TORCH_", "TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "SUITE_")
# torch.distributed's rendezvous variables, and what Python itself reads.
NAMES = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "PYTHONPATH",
         "PYTHONUNBUFFERED", "PYTHONHASHSEED"}
# The memory allocator: glibc malloc's tunables (MALLOC_MMAP_MAX_, MALLOC_TRIM_THRESHOLD_ ...,
# GLIBC_TUNABLES), jemalloc's MALLOC_CONF, tcmalloc's TCMALLOC_*, and LD_PRELOAD that swaps malloc
# itself. On CPUs they moved img/s by up to 60% (docs/telemetry.md, "the CPU memory allocator").
PREFIXES += ("MALLOC_", "TCMALLOC_")
NAMES |= {"LD_PRELOAD", "GLIBC_TUNABLES"}
# Where each host's container engine listens: the docker runtime's client program reads it on every
# host, so it goes with the processes (set it only where every host's engine is at that address).
NAMES |= {"DOCKER_HOST"}
# JAX and XLA read JAX_* (the jaxdist launcher's JAX_COORDINATOR_ADDRESS ..., JAX_PLATFORMS) and XLA_*
# (XLA_FLAGS, XLA_PYTHON_CLIENT_MEM_FRACTION).
PREFIXES += ("JAX_", "XLA_")
# torch.compile's own: TorchInductor's (TORCHINDUCTOR_MAX_AUTOTUNE, TORCHINDUCTOR_CACHE_DIR ...) and Triton's
# (TRITON_CACHE_DIR ...); TORCH_ above does not cover them, and they move a compiled run's figures.
PREFIXES += ("TORCHINDUCTOR_", "TRITON_")
# The fabric and its MPI: libfabric's FI_* (FI_PROVIDER, FI_CXI_*: Slingshot, under NCCL's aws-ofi plugin and
# Cray MPICH) and Cray MPICH's MPICH_*; AMD GPUs' runtime (HIP_*, ROCR_*, HSA_*) and MIOpen's (RCCL reads NCCL_*).
PREFIXES += ("FI_", "MPICH_", "HIP_", "ROCR_", "HSA_", "MIOPEN_")
# TensorFlow reads these TF_ names; a bare TF_ prefix would also catch other tools' (TF_CLI_CONFIG_FILE).
TF_PREFIXES = ("TF_CPP_", "TF_ENABLE_", "TF_GPU_", "TF_CUDNN_")
TF_NAMES = {"TF_CONFIG", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_XLA_FLAGS", "TF_DETERMINISTIC_OPS", "TF_USE_LEGACY_KERAS",
            "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_INTER_OP_PARALLELISM_THREADS",
            "TF_INTRA_OP_PARALLELISM_THREADS"}
# The names a cluster profile's [env] sets (suite/execution/clusters.py), comma-separated, in each process's
# environment: forwarded with the policy's own, whatever their names (FI_*, MPICH_* ...), and read back by
# the probe, which records what each rank saw of them.
SITE_NAMES = "SUITE_SITE_ENV"
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
MASK = "***"
# Variables that describe the launch host, not another one.
HOST_ONLY = ("SLURM_", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def steers_frameworks(name: str) -> bool:
    return name.startswith(PREFIXES + TF_PREFIXES) or name in NAMES | TF_NAMES


def forwarded_patterns() -> list[str]:
    """The policy as a container engine's `--env` arguments (`NAME*` for a prefix, NAME alone for one name:
    the engine copies the value from its own environment), for engines that start the process themselves."""
    return [f"{prefix}*" for prefix in PREFIXES + TF_PREFIXES] + sorted(NAMES | TF_NAMES)


def masked_env(env: Mapping) -> dict:
    """The environment as a record may show it: values of credential-like names are masked."""
    return {k: MASK if SECRET_NAME.search(k) else v for k, v in sorted(env.items())}


def recorded_env(environ: Mapping) -> dict:
    return masked_env({k: v for k, v in environ.items() if steers_frameworks(k)})


def site_names(environ: Mapping) -> set[str]:
    """The names SITE_NAMES lists in `environ`."""
    return {name for name in environ.get(SITE_NAMES, "").split(",") if name}


def forwarded_env(environ: Mapping, remote: bool = False) -> dict:
    """What a process started elsewhere (another host, a container) gets from `environ`: the
    variables that steer frameworks and those the cluster profile set (SITE_NAMES), never credential-like
    ones; for another host, not those that describe this one."""
    site = site_names(environ)
    return {k: v for k, v in environ.items() if (steers_frameworks(k) or k in site) and not SECRET_NAME.search(k)
            and not (remote and k.startswith(HOST_ONLY))}
