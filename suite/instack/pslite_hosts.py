"""The hosts of a ps-lite process as ps-lite wants them: it binds DMLC_NODE_HOST and the scheduler's
DMLC_PS_ROOT_URI as addresses (MXNet's dmlc_tracker sets addresses), while the pslite launcher may name
hosts (SLURM node names); each process resolves them on its own node before `import mxnet` starts a server
or the scheduler there (mxnet-imagenet and the interconnect check alike). Standard library only."""

import os
import socket

NAMED = ("DMLC_NODE_HOST", "DMLC_PS_ROOT_URI")


def resolve_pslite_hosts(environ=os.environ) -> None:
    for name in NAMED:
        if environ.get(name):
            environ[name] = socket.gethostbyname(environ[name])
