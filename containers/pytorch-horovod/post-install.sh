#!/usr/bin/env bash
# Builds Horovod from its pinned sdist into the stack whose lock is already installed.
# Runs in an empty work folder with the stack's bin/ first on PATH, for the local stack and in the
# container definitions alike. STACK_DIR: this folder; SUITE_FACTS_FILE: where to say what was built.
set -euo pipefail
: "${STACK_DIR:?}"

pip download --quiet --no-deps --no-binary :all: --require-hashes -r "$STACK_DIR/sdist.lock" -d sdist
tar -xzf sdist/horovod-*.tar.gz
cd horovod-*/
for p in "$STACK_DIR"/patches/horovod-*.patch; do patch -p1 --forward --quiet < "$p"; done

export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
# The pinned cmake (>= 4) refuses Horovod's cmake_minimum_required(3.13) without this.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
if command -v mpicxx >/dev/null 2>&1; then
  export HOROVOD_WITH_MPI=1; mpi=true
else
  export HOROVOD_WITHOUT_MPI=1; mpi=false
fi
# GPU operations where torch is a CUDA build and a whole CUDA toolkit is at hand. Horovod's CMake adds CUDA
# whenever torch is a CUDA build that finds a toolkit (torch's CUDA_HOME: $CUDA_HOME, else the nvcc on PATH, else
# /usr/local/cuda), so the toolkit both see is chosen here: $HOROVOD_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, the one the
# nvcc on PATH belongs to (asked of nvcc itself: sites and images put wrapper scripts on PATH), /usr/local/cuda;
# whole where it has bin/nvcc and include/cuda_runtime.h. The facts say which toolkit, or none.
toolkit_of_nvcc() {  # the root of the toolkit whose nvcc is first on PATH, or nothing
  command -v nvcc >/dev/null 2>&1 || return 0
  nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n 1 | xargs -r dirname
}
whole_toolkit() { [ -n "$1" ] && [ -x "$1/bin/nvcc" ] && [ -f "$1/include/cuda_runtime.h" ]; }
cuda_home=""
if python -c 'import torch, sys; sys.exit(not torch.version.cuda)'; then
  for candidate in "${HOROVOD_CUDA_HOME:-}" "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$(toolkit_of_nvcc)" /usr/local/cuda; do
    if whole_toolkit "$candidate"; then cuda_home="$candidate"; break; fi
  done
  seen="$(python -c 'from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME or "")' 2>/dev/null)"
  if [ -z "$cuda_home" ] && [ -n "$seen" ]; then
    echo "post-install.sh: torch is a CUDA build and finds CUDA at $seen, which is not a whole toolkit (bin/nvcc and" \
         "include/cuda_runtime.h): Horovod's build needs one; set CUDA_HOME to a CUDA toolkit (e.g. load the site's" \
         "cuda module) or unset what points at $seen" >&2
    exit 1
  fi
fi
if [ -n "$cuda_home" ]; then
  export HOROVOD_CUDA_HOME="$cuda_home" CUDA_HOME="$cuda_home" PATH="$cuda_home/bin:$PATH"
  # NCCL: the site's where HOROVOD_NCCL_HOME or HOROVOD_NCCL_INCLUDE name it, else that of torch's nvidia-nccl
  # wheel (the library torch loads at run time); Horovod's CMake looks for libnccl.so, the wheel ships libnccl.so.2
  if [ -z "${HOROVOD_NCCL_HOME:-}${HOROVOD_NCCL_INCLUDE:-}" ]; then
    header="$(find "${STACK_PREFIX:-$(python -c 'import sys; print(sys.prefix)')}/lib" -name nccl.h -path "*nvidia*" | head -n 1)"
    if [ -n "$header" ]; then
      HOROVOD_NCCL_INCLUDE="$(dirname "$header")"
      export HOROVOD_NCCL_INCLUDE HOROVOD_NCCL_LIB="$(dirname "$HOROVOD_NCCL_INCLUDE")/lib"
      ln -sf libnccl.so.2 "$HOROVOD_NCCL_LIB/libnccl.so"
    fi
  fi
  if [ -n "${HOROVOD_NCCL_HOME:-}${HOROVOD_NCCL_INCLUDE:-}" ]; then export HOROVOD_GPU_OPERATIONS=NCCL; fi
fi
export MAKEFLAGS="-j$(nproc)"
pip install --no-deps --no-build-isolation --no-cache-dir .
cd ..  # away from the source tree, so that the checks import the installed package

horovodrun --check-build
python - "$mpi" "$cuda_home" <<'PY'
import json, os, sys
import horovod.torch as hvd
facts = {"horovod_mpi": hvd.mpi_built(), "horovod_gloo": hvd.gloo_built(),
         "horovod_nccl": hvd.nccl_built() > 0, "mpi_found_at_build": sys.argv[1] == "true",
         "cuda_toolkit": sys.argv[2] or None}
if os.environ.get("SUITE_FACTS_FILE"):
    with open(os.environ["SUITE_FACTS_FILE"], "w") as f:
        json.dump(facts, f)
PY
