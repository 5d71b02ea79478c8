# Sourced by post-install.sh (and by the tests, with fakes): whether Horovod is built with GPU operations, and
# against which CUDA toolkit and NCCL.
#
# Horovod's CMake adds CUDA whenever torch is a CUDA build that finds a toolkit (torch's CUDA_HOME: $CUDA_HOME, else
# the nvcc on PATH, else /usr/local/cuda), so the toolkit both see is chosen here: $HOROVOD_CUDA_HOME, $CUDA_HOME,
# $CUDA_PATH, the one the nvcc on PATH belongs to (asked of nvcc itself: sites and images put wrapper scripts on
# PATH, whose folder is no toolkit), then the last place given; whole where it has bin/nvcc and
# include/cuda_runtime.h. NCCL: the site's where HOROVOD_NCCL_HOME or HOROVOD_NCCL_INCLUDE name it, else that of
# torch's nvidia-nccl wheel in the environment (the library torch loads at run time).

toolkit_of_nvcc() {  # the root of the toolkit whose nvcc is first on PATH, or nothing
  command -v nvcc >/dev/null 2>&1 || return 0
  { nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n 1 | xargs -r dirname; } ||
    true
}

whole_toolkit() { [ -n "$1" ] && [ -x "$1/bin/nvcc" ] && [ -f "$1/include/cuda_runtime.h" ]; }

# choose_gpu_build LAST: sets cuda_home (empty: a CPU build) and exports what Horovod's build reads; exits 1 where
# torch is a CUDA build that sees a toolkit which is not whole (Horovod's build would stop midway)
choose_gpu_build() {
  local candidate seen header
  cuda_home=""
  python -c 'import torch, sys; sys.exit(not torch.version.cuda)' || return 0
  for candidate in "${HOROVOD_CUDA_HOME:-}" "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$(toolkit_of_nvcc)" "$1"; do
    if whole_toolkit "$candidate"; then cuda_home="$candidate"; break; fi
  done
  if [ -z "$cuda_home" ]; then
    seen="$(python -c 'from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME or "")' 2>/dev/null)"
    if [ -n "$seen" ]; then
      echo "post-install.sh: torch is a CUDA build and finds CUDA at $seen, which is not a whole toolkit (bin/nvcc" \
           "and include/cuda_runtime.h): Horovod's build needs one; set CUDA_HOME to a CUDA toolkit (the site's" \
           "cuda module) or unset what points at $seen" >&2
      exit 1
    fi
    return 0
  fi
  export HOROVOD_CUDA_HOME="$cuda_home" CUDA_HOME="$cuda_home" PATH="$cuda_home/bin:$PATH"
  if [ -z "${HOROVOD_NCCL_HOME:-}${HOROVOD_NCCL_INCLUDE:-}" ]; then
    header="$(find "$STACK_PREFIX/lib" -name nccl.h -path "*nvidia*" | head -n 1)"
    if [ -n "$header" ]; then
      HOROVOD_NCCL_INCLUDE="$(dirname "$header")"
      export HOROVOD_NCCL_INCLUDE HOROVOD_NCCL_LIB="$(dirname "$HOROVOD_NCCL_INCLUDE")/lib"
      ln -sf libnccl.so.2 "$HOROVOD_NCCL_LIB/libnccl.so"  # Horovod's CMake looks for libnccl.so
    fi
  fi
  if [ -n "${HOROVOD_NCCL_HOME:-}${HOROVOD_NCCL_INCLUDE:-}" ]; then export HOROVOD_GPU_OPERATIONS=NCCL; fi
}
