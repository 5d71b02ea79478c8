"""Timing probe imported by case scripts inside their stack. Standard library only.

Each rank appends JSON lines to $SUITE_RUN_DIR/ranks/rank-<rank>.jsonl: one `start` line (config,
versions, host facts), then either a `warmup` line and one `iteration` line per timed iteration
(step-based cases) or one `epoch` line per epoch (epoch-based cases: the first epoch is the warmup),
optional `result` lines, and one `end` line. A line is written after the timed work, so the probe
adds no I/O inside a timed window. Before its warmup a case may say what a sample costs (`work`: the
model's FLOPs per sample of a training step, and where that figure comes from) and what its device
can do (`peak`: a measured matmul rate per device), for the record's utilisation (MFU).

Beside its wall time every timed unit says where the rank's time went, for the run's diagnosis
(suite/analysis/diagnosis.py): `cpu_s`, the CPU time of the rank's process (all its threads); `thread_s`, the
CPU time of the thread that trains (on a GPU: the thread that launches the work, busy all the time
when the host bounds the step); `data_wait_s`, the time the loop waited for its next batch, where the
case times it (`with probe.data_wait(): batch = next(batches)`).
"""

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager


class Probe:
    def __init__(self, rank: int, size: int, local_rank: int = 0, local_size: int = 1, run_dir: str | None = None,
                 samples: str = "images"):
        """`samples`: what the case's counts are (images, tokens), for the lines it prints."""
        self.rank, self.size = rank, size
        self.samples, self.rate = samples, "img/s" if samples == "images" else f"{samples}/s"
        self.local_rank, self.local_size = local_rank, local_size
        run_dir = run_dir or os.environ.get("SUITE_RUN_DIR") or "."
        os.makedirs(os.path.join(run_dir, "ranks"), exist_ok=True)
        self._file = open(os.path.join(run_dir, "ranks", f"rank-{rank:05d}.jsonl"), "a", buffering=1)
        self._iterations = 0
        self._mllog = MLLog(os.path.join(run_dir, "ranks", f"rank-{rank:05d}.mllog"), rank)
        self._trained = 0
        self._waited = None  # seconds waiting for data in the current unit; None: the case does not time it
        self._unit = _Usage()

    def _write(self, event: str, **fields) -> None:
        self._file.write(json.dumps({"event": event, "rank": self.rank, "time": time.time(), **fields}) + "\n")

    def start(self, config: dict, versions: dict) -> None:
        """The rank's start line: what it runs (config: device_type and device_name among it; where a
        process drives several GPUs, `device_indices` lists them, else it drives the one of its local
        rank), versions, host facts, the GPUs it trains on (index, UUID, bus id) and the values it sees of
        the variables the cluster profile set (site_env_seen). Where the runner
        asked for GPUs (SUITE_DEVICE=cuda) and the rank found none, it stops here, saying so."""
        versions = {"python": platform.python_version(), **versions, "mlperf_logging": self._mllog.version}
        host = host_info() if self.local_rank == 0 else None
        gpus = [visible_gpu(i) for i in config.get("device_indices") or [self.local_rank]] \
            if config.get("device_type") == "cuda" else []
        self._write("start", size=self.size, local_rank=self.local_rank, local_size=self.local_size,
                    host=socket.gethostname(), pid=os.getpid(), host_info=host, config=config, versions=versions,
                    gpus=gpus, binding={"policy": os.environ.get("SUITE_CPU_BIND", "none"), "cpus": cpus_allowed()},
                    site_env=site_env_seen(os.environ))
        refuse_other_device(config.get("device_type"), config.get("device_name"))
        if config.get("global_batch"):
            self._mllog.log("event", "global_batch_size", config["global_batch"])
        self._mllog.log("start", "run_start")

    @contextmanager
    def warmup(self, images: int, sync=None):
        self._say(f"warmup: {images} {self.samples} per device, not timed")
        with _timed(sync) as elapsed:
            yield
        self._write("warmup", images=images, seconds=elapsed())
        self._trained += images
        self._say(f"warmup done in {elapsed():.1f} s")

    @contextmanager
    def data_wait(self):
        """Times how long the loop waits for its next batch (inside a timed unit)."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self._waited = (self._waited or 0.0) + time.perf_counter() - begin

    def _usage(self) -> dict:
        """Where the rank's time went since the unit began (and begins the next)."""
        used = self._unit.since()
        if self._waited is not None:
            used["data_wait_s"] = self._waited
        self._waited, self._unit = None, _Usage()
        return used

    @contextmanager
    def iteration(self, images: int, sync=None, total: int | None = None):
        """Times one iteration of `images` images on this rank; `sync` waits for the device."""
        self._usage()
        with _timed(sync) as elapsed:
            yield
        seconds = elapsed()
        self._write("iteration", index=self._iterations, images=images, seconds=seconds, **self._usage())
        self._mllog.timed("block", self._iterations, images * self.size, seconds)
        self._trained += images
        self._iterations += 1
        rate = images / seconds
        of = f"/{total}" if total else ""
        self._say(f"iteration {self._iterations}{of}: {rate:.1f} {self.rate} per device, "
                  f"~{rate * self.size:.1f} {self.rate} on {self.size} device(s)")

    def epoch_begin(self, sync=None) -> None:
        """For epoch-based cases (e.g. from a Keras callback): marks the start of an epoch."""
        if sync:
            sync()
        self._usage()
        self._epoch_began = time.perf_counter()

    def epoch_end(self, images: int, sync=None, total: int | None = None, **metrics) -> None:
        """Ends the epoch begun last: `images` this rank trained on, plus loss, accuracy, ..."""
        if sync:
            sync()
        seconds = time.perf_counter() - self._epoch_began
        index = self._epochs = getattr(self, "_epochs", 0) + 1
        self._write("epoch", index=index - 1, images=images, seconds=seconds, metrics=metrics, **self._usage())
        self._mllog.timed("epoch", index - 1, images * self.size, seconds)
        self._trained += images
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float)))
        of = f"/{total}" if total else ""
        self._say(f"epoch {index}{of}: {seconds:.1f} s, ~{images * self.size / seconds:.1f} {self.rate}"
                  + (f", {shown}" if shown else "")
                  + (" (first epoch: not counted in throughput)" if index == 1 else ""))

    def work(self, flops_per_sample: float, source: str, precision: str | None = None) -> None:
        """What one sample (an image, a sequence) costs to train: the model's FLOPs of one training
        step per sample (forward and backward), where the figure comes from (counted, profiled, an
        architecture's count), and the precision the step's matrix products run in (fp32, tf32, bf16,
        fp16; None: judged from the record's dtype and device)."""
        self._write("work", flops_per_sample=flops_per_sample, source=source, precision=precision)

    def measured_peak(self, flops_per_s: float, precision: str, **how) -> None:
        """The best FLOP/s per device of large matrix products at `precision`, measured by the case
        before its warmup, and how (matrix side, seconds, ...)."""
        self._write("peak", flops_per_s=flops_per_s, precision=precision, **how)
        self._say(f"measured matmul peak: {flops_per_s / 1e12:.3g} TFLOP/s per device ({precision})")

    def result(self, **metrics) -> None:
        """Figures of the whole run that are not timings, e.g. test accuracy."""
        self._write("result", metrics=metrics)

    def _say(self, message: str) -> None:
        if self.rank == 0:
            print(message, flush=True)

    def end(self) -> None:
        self._write("end", iterations=self._iterations)
        self._file.close()
        self._mllog.log("event", "train_samples", self._trained * self.size)
        self._mllog.log("end", "run_stop", metadata={"status": "success"})


class MLLog:
    """MLPerf-style `:::MLLOG` lines in the rank's raw log (ranks/rank-<rank>.mllog), written with
    mlperf-logging where the stack has it, nothing where not. Like the probe's own lines they are
    written after the timed work, carrying the times it began and ended."""

    def __init__(self, path: str, rank: int):
        self.version = None  # of mlperf-logging, where the stack has it
        try:
            from mlperf_logging.mllog.mllog import MLLogger
        except ImportError:
            self.logger = None
            return
        self.version = _distribution_version("mlperf-logging") or "unknown"
        import logging

        logger = logging.getLogger(f"suite.mllog.rank-{rank}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        if not logger.handlers:
            logger.addHandler(logging.FileHandler(path))
        self.logger = MLLogger(logger=logger, default_stack_offset=2)

    def log(self, kind: str, key: str, value=None, metadata=None, at: float | None = None) -> None:
        """kind: start, end (an interval) or event; `at`: seconds since the epoch, default now."""
        if self.logger is not None:
            getattr(self.logger, kind)(key, value, metadata=metadata, time_ms=None if at is None else int(at * 1e3))

    def timed(self, unit: str, index: int, images: int, seconds: float) -> None:
        """A timed iteration (an MLPerf block) or epoch that just ended, and its throughput as NVIDIA's
        submissions log it (tracked_stats); `images` of all ranks, estimated from this rank's."""
        end = time.time()
        number = {"first_epoch_num": index, "epoch_count": 1} if unit == "block" else {"epoch_num": index}
        self.log("start", f"{unit}_start", metadata=number, at=end - seconds)
        self.log("end", f"{unit}_stop", metadata=number, at=end)
        self.log("event", "tracked_stats", {"throughput": images / seconds}, metadata={"step": index}, at=end)


class _Usage:
    """CPU time of this process and of the calling thread from now on."""

    def __init__(self):
        self.process, self.thread = time.process_time(), time.thread_time()

    def since(self) -> dict:
        return {"cpu_s": time.process_time() - self.process, "thread_s": time.thread_time() - self.thread}


@contextmanager
def _timed(sync):
    if sync:
        sync()
    begin = time.perf_counter()
    result = {}
    yield lambda: result["seconds"]
    if sync:
        sync()
    result["seconds"] = time.perf_counter() - begin


def site_env_seen(environ) -> dict[str, str | None]:
    """The values this process sees of the variables the cluster profile set ({} where it set none): the
    runner lists their names in SUITE_SITE_ENV (suite.base.env_policy.SITE_NAMES, which this layer may not
    import), and the record compares what each rank saw with what was planned."""
    return {name: environ.get(name) for name in environ.get("SUITE_SITE_ENV", "").split(",") if name}


def refuse_other_device(device_type: str | None, device_name: str | None) -> None:
    """Ends the rank where it trains on another device than the runner asked for (SUITE_DEVICE)."""
    asked = os.environ.get("SUITE_DEVICE")
    if asked and device_type != asked:
        raise SystemExit(f"asked to train on {asked} (GPUs are present and were asked for) but this rank found "
                         f"{device_name or device_type}: the framework sees no GPU (a CPU build, or a driver older "
                         "than its CUDA); CUDA_VISIBLE_DEVICES= runs on the CPU on purpose")


def visible_gpu(index: int) -> dict:
    """The GPU a process sees as device `index`: its entry in CUDA_VISIBLE_DEVICES (an index or a UUID)
    where that is set, matched with nvidia-smi's list (index, UUID, PCI bus id) where that is there."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    entry = visible[index] if index < len(visible) else str(index)
    found = {"device_index": index, "visible_as": entry}
    for gpu in nvidia_smi_gpus():
        if entry == gpu["index"] or (len(entry) > 4 and gpu["uuid"].startswith(entry)):
            return {**found, **gpu}
    return found


def nvidia_smi_gpus() -> list[dict]:
    """index, uuid, bus_id and name of each GPU nvidia-smi lists (none without nvidia-smi)."""
    return _query_gpus({"index": "index", "uuid": "uuid", "bus_id": "pci.bus_id", "name": "name"})


def _query_gpus(fields: dict[str, str]) -> list[dict]:
    """One dict per GPU nvidia-smi lists, of `fields` (our name -> nvidia-smi's --query-gpu name); none
    without nvidia-smi. A line of another number of fields is not an answer to the query (a stand-in
    nvidia-smi, an error) and is left out."""
    if not shutil.which("nvidia-smi"):
        return []
    query = ["nvidia-smi", f"--query-gpu={','.join(fields.values())}", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [[part.strip() for part in line.split(",")] for line in out.strip().splitlines()]
    return [dict(zip(fields, row, strict=True)) for row in rows if len(row) == len(fields)]


def _distribution_version(name: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version(name)
    except (ImportError, PackageNotFoundError):
        return None


def announce() -> None:
    """Says where this process runs, for the record's `ran_on`: every process of a plan (servers and
    schedulers that never reach a probe line too) writes $SUITE_RUN_DIR/where/<process>@<host>.json.
    The workers a launcher program starts (horovodrun, torchrun's agent) inherit its name: its entry
    lists every host they ran on. Nothing where the runner did not name the process."""
    run_dir, name = os.environ.get("SUITE_RUN_DIR"), os.environ.get("SUITE_PROCESS")
    if not run_dir or not name:
        return
    host = socket.gethostname()
    os.makedirs(os.path.join(run_dir, "where"), exist_ok=True)
    with open(os.path.join(run_dir, "where", f"{name}@{host}.json"), "w") as f:
        json.dump({"process": name, "host": host, "pid": os.getpid(), "time": time.time()}, f)


def announced(run_dir: str) -> dict[str, list[str]]:
    """process name -> the hosts it (or what it started) announced, from a repetition's folder."""
    found: dict[str, set[str]] = {}
    folder = os.path.join(run_dir, "where")
    for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, entry)) as f:
                said = json.load(f)
        except (OSError, ValueError):
            continue
        found.setdefault(said["process"], set()).add(said["host"])
    return {name: sorted(hosts) for name, hosts in found.items()}


def host_info() -> dict:
    """What the machine is, for the record: CPU, memory, GPUs and driver where nvidia-smi exists, network links."""
    info = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpus": _gpus(),
        "network": network_links(),
        "nccl_conf": nccl_conf(),
    }
    return info


NCCL_SYSTEM_CONF = "/etc/nccl.conf"


def nccl_conf(environ=os.environ, home: str | None = None, system: str = NCCL_SYSTEM_CONF) -> dict:
    """The settings of NCCL's configuration files where this process runs, by file, in the order NCCL reads them:
    $NCCL_CONF_FILE (else ~/.nccl.conf, the account's home as the password database has it), then /etc/nccl.conf.
    NCCL takes a file's NAME=value where neither the environment nor a file read before sets NAME; lines
    starting with # and lines without = are skipped, as NCCL skips them. Files absent or empty are left out."""
    home = home if home is not None else _account_home()
    user = environ.get("NCCL_CONF_FILE") or (os.path.join(home, ".nccl.conf") if home else None)
    found = {}
    for path in (user, system):
        if path and (settings := _conf_settings(path)):
            found[path] = settings
    return found


def _account_home() -> str | None:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:  # a container's user the image's passwd does not list
        return None


def _conf_settings(path: str) -> dict[str, str]:
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#") and "=" in line]
    return {name: value for name, value in pairs if name}


def cpus_allowed() -> str | None:
    """The cpus this process may run on, as the kernel says (/proc/self/status), e.g. "0-3,8"."""
    return _proc_field("/proc/self/status", "Cpus_allowed_list:")


def _proc_field(path: str, prefix: str) -> str | None:
    """The value of the first line of a /proc file that starts with `prefix` (`name: value`)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str | None:
    return _proc_field("/proc/cpuinfo", "model name") or platform.processor() or None


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        return round(kib / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return None


NET_TYPES = {"1": "Ethernet", "32": "IPoIB"}  # /sys/class/net/<if>/type: ARPHRD_ETHER, ARPHRD_INFINIBAND


def network_links(sys_class: str = "/sys/class") -> list[dict]:
    """The host's links, for the record: each port of each InfiniBand or RoCE device (its rate, link layer and
    state) and each interface of a device (not lo, bridges, veths, tunnels: those have no `device`), with
    its speed where the driver says it (a VM's often does not), MTU and state."""
    links = []
    ib = os.path.join(sys_class, "infiniband")
    for device in _listed(ib):
        for port in _listed(os.path.join(ib, device, "ports")):
            folder = os.path.join(ib, device, "ports", port)
            rate = _sys_text(os.path.join(folder, "rate"))  # "200 Gb/sec (4X HDR)"
            state = _sys_text(os.path.join(folder, "state"))  # "4: ACTIVE"
            links.append({"name": f"{device}/{port}", "type": _sys_text(os.path.join(folder, "link_layer")),
                          "rate_gbit_s": _number(rate.split()[0]) if rate else None,
                          "state": state.split(":")[-1].strip() if state else None})
    net = os.path.join(sys_class, "net")
    for name in _listed(net):
        if not os.path.exists(os.path.join(net, name, "device")):
            continue
        speed = _number(_sys_text(os.path.join(net, name, "speed")))  # Mbit/s; -1 or unreadable: not known
        kind = _sys_text(os.path.join(net, name, "type"))
        links.append({"name": name, "type": NET_TYPES.get(kind or "", f"type {kind}"),
                      "rate_gbit_s": speed / 1000 if speed and speed > 0 else None,
                      "mtu": _number(_sys_text(os.path.join(net, name, "mtu"))),
                      "state": _sys_text(os.path.join(net, name, "operstate"))})
    return links


def _listed(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _sys_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:  # sysfs answers EINVAL for a speed it does not know
        return None


def _number(text: str | None) -> float | int | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return int(value) if value.is_integer() else value


def _gpus() -> list[dict]:
    return _query_gpus({"name": "name", "driver": "driver_version", "memory": "memory.total"})


if __name__ == "__main__":
    json.dump(host_info(), sys.stdout, indent=2)
