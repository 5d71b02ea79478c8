"""Telemetry sampler: one per host of a run, started by the runner beside the case's processes (by the
same scheduler: here, over ssh, as an srun step) and ended with them (SIGTERM). Standard library,
psutil, and pynvml (nvidia-ml-py) where importable; of the suite only suite/instack, so it runs anywhere the
runner's Python does:

    python suite/instack/telemetry_sampler.py --out DIR/HOST.jsonl [--interval 1] [--match SUITE_RUN_DIR=...]

Writes JSON lines: one `start` line saying what can be sampled here (and why not where not), then a
sample every interval: per-core CPU %, memory used, RSS of the run's processes (those whose
environment holds --match), per GPU utilisation, memory, power, energy counter, temperature, SM clock,
PCIe and NVLink bytes (NVML), and CPU package energy counters (Linux RAPL). The suite cuts them
to the probe's timed window (suite/records/telemetry_window.py)."""

import argparse
import glob
import json
import os
import signal
import socket
import sys
import time

from suite.instack.run_marker import carries

RAPL_GLOB = "/sys/class/powercap/intel-rapl:[0-9]*"  # packages; their sub-zones (core, dram) are not summed
# NVML_FI_DEV_PCIE_COUNT_TX_BYTES and _RX_BYTES (nvml.h), by number: an older pynvml has no name for
# them, and an older driver answers them as not supported
PCIE_BYTES = [197, 198]
# nvmlValueType_t of 64 bits -> its member of the value union (unsigned long is 64 bits on 64-bit Linux): a byte
# counter of 32 bits wraps more than once a second at PCIe 5's speed, so such an answer is not read
WIDE = {2: "ulVal", 3: "ullVal", 4: "sllVal"}


class Gpus:
    """NVML, or the reason it is not available: the GPUs the run may use only (CUDA_VISIBLE_DEVICES,
    by index or UUID, where set), never another job's on a shared node. A metric the GPU does not
    support is asked once."""

    def __init__(self, nvml=None, visible: str | None = None):
        """`visible`: the run's CUDA_VISIBLE_DEVICES (None: unset, every GPU)."""
        self.nvml, self.handles, self.ids, self.missing, self.why = nvml, [], [], set(), None
        try:
            if self.nvml is None:
                import pynvml as nvml_module
                self.nvml = nvml_module
            self.nvml.nvmlInit()
            every = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.nvml.nvmlDeviceGetCount())]
            chosen = run_gpus([(i, self._uuid(h)) for i, h in enumerate(every)], visible)
            self.ids = [{"nvml_index": i, "uuid": uuid, "bus_id": self._bus_id(every[i])} for i, uuid in chosen]
            self.handles = [every[i] for i, _ in chosen]
        except Exception as exc:  # ImportError, NVMLError (no driver, no library), OSError
            self.why = f"not available: {type(exc).__name__}: {exc}"
        if not self.handles and self.why is None:
            of = f" of CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
            self.why = f"not available: NVML lists no GPU{of}"

    def _uuid(self, handle) -> str | None:
        try:
            return _text(self.nvml.nvmlDeviceGetUUID(handle))
        except Exception:  # NVMLError_NotSupported and friends
            return None

    def _bus_id(self, handle) -> str | None:
        try:
            return _text(self.nvml.nvmlDeviceGetPciInfo(handle).busId)
        except Exception:  # NVMLError_NotSupported and friends
            return None

    def describe(self):
        if self.why:
            return self.why
        return [{"index": i, "name": _text(self._call(i, "name", self.nvml.nvmlDeviceGetName, h)), **self.ids[i],
                 "memory_total": getattr(self._call(i, "memory", self.nvml.nvmlDeviceGetMemoryInfo, h), "total", None)}
                for i, h in enumerate(self.handles)]

    def _call(self, index: int, metric: str, function, *args):
        if (index, metric) in self.missing:
            return None
        try:
            return function(*args)
        except Exception:  # NVMLError_NotSupported and friends: this GPU has no such figure
            self.missing.add((index, metric))
            return None

    def sample(self) -> list[dict]:
        return [self._one(i, h) for i, h in enumerate(self.handles)]

    def _one(self, index: int, handle) -> dict:
        n = self.nvml

        def call(metric, function, *args):
            return self._call(index, metric, function, *args)

        util = call("util", n.nvmlDeviceGetUtilizationRates, handle)
        memory = call("memory", n.nvmlDeviceGetMemoryInfo, handle)
        power = call("power", n.nvmlDeviceGetPowerUsage, handle)  # mW
        energy = call("energy", n.nvmlDeviceGetTotalEnergyConsumption, handle)  # mJ since driver load
        return {"util": getattr(util, "gpu", None), "mem_used": getattr(memory, "used", None),
                "power_w": power / 1e3 if power is not None else None,
                "energy_j": energy / 1e3 if energy is not None else None,
                "temp_c": call("temp", n.nvmlDeviceGetTemperature, handle, n.NVML_TEMPERATURE_GPU),
                "sm_mhz": call("clock", n.nvmlDeviceGetClockInfo, handle, n.NVML_CLOCK_SM),
                **self._pcie(index, handle), **self._nvlink(index, handle)}

    def _pcie(self, index: int, handle) -> dict:
        """Bytes over PCIe: the driver's running counters where it has them, read at once; else its
        throughput query, which watches the link for 20 ms per direction inside the driver, beside the run."""
        if counted := self._counters(index, "pcie", handle, PCIE_BYTES, WIDE):
            return {"pcie_tx_bytes": counted[0], "pcie_rx_bytes": counted[1]}
        n = self.nvml
        return {"pcie_tx_kbs": self._call(index, "pcie_tx", n.nvmlDeviceGetPcieThroughput, handle,
                                          n.NVML_PCIE_UTIL_TX_BYTES),
                "pcie_rx_kbs": self._call(index, "pcie_rx", n.nvmlDeviceGetPcieThroughput, handle,
                                          n.NVML_PCIE_UTIL_RX_BYTES)}

    def _nvlink(self, index: int, handle) -> dict:
        fields = [self.nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, self.nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
        if counted := self._counters(index, "nvlink", handle, fields):
            return {"nvlink_tx_kib": counted[0], "nvlink_rx_kib": counted[1]}
        return {}

    def _counters(self, index: int, metric: str, handle, fields: list[int], types: dict | None = None):
        """NVML field values that are counters (read as `types` says, by each answer's valueType; None: as
        unsigned 64 bits), or None where this GPU or driver has any of them not, or not of those types (then
        never asked again)."""
        values = self._call(index, metric, self.nvml.nvmlDeviceGetFieldValues, handle, fields)
        if values and all(v.nvmlReturn == 0 and (types is None or v.valueType in types) for v in values):
            return [getattr(v.value, types[v.valueType]) if types else v.value.ullVal for v in values]
        self.missing.add((index, metric))
        return None


def run_gpus(gpus: list[tuple[int, str | None]], visible: str | None) -> list[tuple[int, str | None]]:
    """The (NVML index, UUID) pairs a run may use: all where CUDA_VISIBLE_DEVICES is unset, else those
    it names, by index or by UUID (or a UUID's leading part, as CUDA accepts), in its order."""
    if visible is None:
        return gpus
    chosen = []
    for entry in (v.strip() for v in visible.split(",")):
        if not entry or entry == "-1":
            break  # CUDA stops at the first entry it cannot use
        found = next((g for g in gpus if entry == str(g[0]) or (len(entry) > 4 and (g[1] or "").startswith(entry))),
                     None)
        if found is None:
            break
        chosen.append(found)
    return chosen


def _text(value) -> str | None:
    """NVML strings are bytes in older pynvml releases."""
    return value.decode() if isinstance(value, bytes) else value


class Rapl:
    """CPU package energy counters (µJ, wrapping at max_energy_range_uj), where readable."""

    def __init__(self, pattern=RAPL_GLOB):
        self.zones, self.why = {}, None
        for zone in sorted(glob.glob(pattern)):
            try:
                name = open(f"{zone}/name").read().strip()
                wrap = int(open(f"{zone}/max_energy_range_uj").read())
                int(open(f"{zone}/energy_uj").read())
                self.zones[f"{name}@{os.path.basename(zone)}"] = (f"{zone}/energy_uj", wrap)
            except (OSError, ValueError) as exc:
                self.why = f"not available: {zone}: {exc}"
        if not self.zones:
            self.why = self.why or f"not available: no readable {RAPL_GLOB}"

    def describe(self):
        return self.why or {name: {"wrap_j": wrap / 1e6} for name, (_, wrap) in self.zones.items()}

    def sample(self) -> dict:
        return {name: int(open(path).read()) / 1e6 for name, (path, _) in self.zones.items()}


class RunProcesses:
    """The processes of this run on this host: their environment holds `match` (e.g. SUITE_RUN_DIR=...);
    each pid is looked at once."""

    def __init__(self, match: str | None):
        self.match = match.encode() if match else None
        self.seen: dict[int, bool] = {}

    def rss(self, psutil) -> tuple[int, int]:
        if not self.match:
            return 0, 0
        total, count = 0, 0
        self.seen = {pid: self.seen[pid] if pid in self.seen else self._ours(pid) for pid in psutil.pids()}
        for pid in [pid for pid, ours in self.seen.items() if ours]:
            try:
                total += psutil.Process(pid).memory_info().rss
                count += 1
            except (psutil.Error, OSError):  # ended meanwhile
                self.seen[pid] = False
        return total, count

    def _ours(self, pid: int) -> bool:
        return carries(pid, self.match)


class Stop(Exception):
    """SIGTERM/SIGINT: the job has ended."""


def _stop(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the last sample short
    raise Stop


def run(out: str, interval: float, match: str | None, gpus=None, rapl=None) -> None:
    import psutil

    gpus = gpus or Gpus(visible=os.environ.get("CUDA_VISIBLE_DEVICES"))  # the run's, as its processes see them
    rapl, procs = rapl or Rapl(), RunProcesses(match)
    psutil.cpu_percent(percpu=True)  # the first call only starts the count
    parent = os.getppid()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "a", buffering=1) as f:
        f.write(json.dumps({"event": "start", "time": time.time(), "host": socket.gethostname(), "pid": os.getpid(),
                            "interval": interval, "cores": psutil.cpu_count(), "match": match,
                            "memory_total": psutil.virtual_memory().total, "gpus": gpus.describe(),
                            "rapl": rapl.describe()}) + "\n")
        due = time.monotonic()
        try:
            while os.getppid() == parent:  # orphaned (its starter died without ending it): stop
                due += interval
                time.sleep(max(0.0, due - time.monotonic()))
                f.write(json.dumps(sample(psutil, procs, gpus, rapl)) + "\n")
        except Stop:  # one more: the moment the job ended, so samples lie beyond the timed window's end
            f.write("\n" + json.dumps(sample(psutil, procs, gpus, rapl)) + "\n")


def sample(psutil, procs: RunProcesses, gpus: Gpus, rapl: Rapl) -> dict:
    """One sample, and the seconds it took (`took_s`: what the sampler spends beside the run each interval)."""
    began = time.perf_counter()
    rss, count = procs.rss(psutil)
    out = {"time": time.time(), "cpu": psutil.cpu_percent(percpu=True), "mem_used": psutil.virtual_memory().used,
           "rss": rss, "processes": count}
    if gpus.handles:
        out["gpus"] = gpus.sample()
    if rapl.zones:
        out["rapl_j"] = rapl.sample()
    out["took_s"] = round(time.perf_counter() - began, 6)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON-lines file to append samples to")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--match", default=None, help="NAME=VALUE in the environment of the run's processes")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        run(args.out, args.interval, args.match)
    except Stop:  # before the first sample
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
