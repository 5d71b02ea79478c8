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
# GPU operations where torch is a CUDA build and a whole CUDA toolkit is at hand (gpu-build.sh); the facts say
# which toolkit, or none
source "$STACK_DIR/gpu-build.sh"
choose_gpu_build /usr/local/cuda
export MAKEFLAGS="-j$(nproc)"
# Without debug information unless asked (HOROVOD_BUILD_TYPE=RelWithDebInfo, Horovod's own choice): the same -O3,
# about a fifth less build time and an extension a thirtieth the size (patches/horovod-*-build-type.patch)
export HOROVOD_BUILD_TYPE="${HOROVOD_BUILD_TYPE:-Release}"
pip install --no-deps --no-build-isolation --no-cache-dir .
cd ..  # away from the source tree, so that the checks import the installed package

horovodrun --check-build
python - "$mpi" "$cuda_home" "$HOROVOD_BUILD_TYPE" <<'PY'
import json, os, sys
import horovod.torch as hvd
facts = {"horovod_mpi": hvd.mpi_built(), "horovod_gloo": hvd.gloo_built(),
         "horovod_nccl": hvd.nccl_built() > 0, "mpi_found_at_build": sys.argv[1] == "true",
         "cuda_toolkit": sys.argv[2] or None, "horovod_build_type": sys.argv[3]}
if os.environ.get("SUITE_FACTS_FILE"):
    with open(os.environ["SUITE_FACTS_FILE"], "w") as f:
        json.dump(facts, f)
PY
