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
# TensorFlow reads these TF_ names; a bare TF_ prefix would also catch other tools' (TF_CLI_CONFIG_FILE).
TENSORFLOW = re.compile(r"^TF_(CONFIG|CPP_\w+|ENABLE_\w+|GPU_\w+|FORCE_GPU_ALLOW_GROWTH|XLA_FLAGS|DETERMINISTIC_OPS|"
                        r"CUDNN_\w+|USE_LEGACY_KERAS|NUM_INTEROP_THREADS|NUM_INTRAOP_THREADS|"
                        r"INTER_OP_PARALLELISM_THREADS|INTRA_OP_PARALLELISM_THREADS)$")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
MASK = "***"
# Variables that describe the launch host, not another one.
HOST_ONLY = ("SLURM_", "CUDA_VISIBLE_DEVICES")


def steers_frameworks(name: str) -> bool:
    return name.startswith(PREFIXES) or name in NAMES or bool(TENSORFLOW.match(name))


def masked_env(env: Mapping) -> dict:
    """The environment as a record may show it: values of credential-like names are masked."""
    return {k: MASK if SECRET_NAME.search(k) else v for k, v in sorted(env.items())}


def recorded_env(environ: Mapping) -> dict:
    return masked_env({k: v for k, v in environ.items() if steers_frameworks(k)})


def forwarded_env(environ: Mapping, remote: bool = False) -> dict:
    """What a process started elsewhere (another host, a container) gets from `environ`: the
    variables that steer frameworks, never credential-like ones; for another host, not those that
    describe this one."""
    return {k: v for k, v in environ.items()
            if steers_frameworks(k) and not SECRET_NAME.search(k) and not (remote and k.startswith(HOST_ONLY))}
