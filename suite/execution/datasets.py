"""A case's dataset made by the case's own data script, run inside the case's local stack (`suite data`)."""

import os
import subprocess
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import plugins
from suite.execution.clusters import load_cluster
from suite.execution.plan import StackRequest
from suite.inputs.cases import load_case
from suite.stacks.recipes import load_stack


def prepare_dataset(case_name: str, data_dir: Path | None, cluster_name: str | None, script_args: list[str]) -> int:
    """Runs the case's data script into data_dir (default: the cluster profile's data_dir, else the suite's
    data folder) with script_args; its exit status."""
    case = load_case(case_name)
    if case.data_script is None:
        raise UsageError(f"case {case.name} needs no data")
    cluster = load_cluster(cluster_name) if cluster_name else None
    folder = Path(data_dir or (cluster and cluster.data_dir) or paths.data_dir()).resolve()
    want = StackRequest(load_stack(case.stack), wheels=cluster.wheels if cluster else None)
    stack_env = plugins.load("runtimes", "local").prepare(want, print)
    argv = stack_env.argv("python", str(case.data_script), "--data-dir", str(folder), *script_args)
    return subprocess.run(argv, env={**os.environ, **stack_env.env}).returncode
