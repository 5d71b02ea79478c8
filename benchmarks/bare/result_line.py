"""The JSON line a GPT or JAX bare loop ends with: its samples and throughput, the config and CPU binding as the
case reports them (for the bench to compare the two sides), its phases, device, host and settings. Imported after
the loop put the project on sys.path."""

import json
import os
import socket

from suite.instack.probe import cpus_allowed


def print_result(samples: list[float], config: dict, phases: dict, args) -> None:
    binding = {"policy": os.environ.get("SUITE_CPU_BIND", "none"), "cpus": cpus_allowed()}
    print(json.dumps({"samples": samples, "throughput": sum(samples) / len(samples), "config": config,
                      "phases": phases, "binding": binding, "device_type": config["device_type"],
                      "device_name": config["device_name"], "host": socket.gethostname(), "settings": vars(args)}))
