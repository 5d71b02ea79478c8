"""A simple scaling model for synchronous data-parallel training, fitted to measured (or published)
throughput and used to predict device counts not at hand. docs/scaling.md explains it.

    step time T(n) = compute + bytes(n) / bandwidth + hops(n) * latency
    throughput(n)  = n * batch_per_device / T(n)

ring all-reduce (Horovod, MultiWorkerMirrored): bytes = 2 (n-1)/n * G, hops = 2 (n-1)
parameter server (ps-lite, one server per node, devices of a node reduced locally first):
    workers W = ceil(n / devices_per_node); every worker pushes and pulls G, spread over W servers,
    so each node's link carries 2 G per step once W > 1; hops = W (the synchronisation waits for all)
G = parameters x bytes per parameter (the gradient). compute, 1/bandwidth and latency are fitted by
non-negative least squares on the step times, or bandwidth and latency come from a cluster profile.
"""

import math
from dataclasses import dataclass

from suite.base.stats import fmt_number, speedup_efficiency
from suite.records.read import latest

EXCHANGES = ("ring", "parameter-server")


@dataclass(frozen=True)
class Exchange:
    kind: str
    gradient_bytes: float
    devices_per_node: int = 1

    def traffic(self, n: int) -> tuple[float, float]:
        """(bytes over the slowest link, latency-bound hops) per step on n devices."""
        if self.kind == "ring":
            return 2 * (n - 1) / n * self.gradient_bytes, 2.0 * (n - 1)
        workers = math.ceil(n / self.devices_per_node)
        return (2 * self.gradient_bytes, float(workers)) if workers > 1 else (0.0, 0.0)


@dataclass(frozen=True)
class Model:
    exchange: Exchange
    batch_per_device: int
    compute_s: float
    seconds_per_byte: float
    latency_s: float
    fitted_on: tuple[int, ...]

    @property
    def bandwidth_gbit_s(self) -> float | None:
        return 8 / self.seconds_per_byte / 1e9 if self.seconds_per_byte > 0 else None

    def step_seconds(self, n: int) -> float:
        volume, hops = self.exchange.traffic(n)
        return self.compute_s + volume * self.seconds_per_byte + hops * self.latency_s

    def throughput(self, n: int) -> float:
        return n * self.batch_per_device / self.step_seconds(n)

    def efficiency(self, n: int) -> float:
        """Against one device at the same per-device batch (weak scaling), as a fraction."""
        [(_, percent)] = speedup_efficiency([(n, self.throughput(n))], (1, self.throughput(1)))
        return percent / 100

    def describe(self) -> str:
        bw = f"{fmt_number(self.bandwidth_gbit_s, 2)} Gbit/s" if self.bandwidth_gbit_s else "not limiting"
        return (f"{self.exchange.kind} exchange of {fmt_number(self.exchange.gradient_bytes / 1e6)} MB gradients "
                f"per step, batch {self.batch_per_device}/device; compute {fmt_number(self.compute_s * 1e3)} ms/step, "
                f"effective bandwidth {bw}, latency {fmt_number(self.latency_s * 1e6)} us per hop; "
                f"fitted on devices {', '.join(map(str, self.fitted_on))}")


def fit(points: dict[int, float], exchange: Exchange, batch_per_device: int,
        bandwidth_gbit_s: float | None = None, latency_us: float | None = None) -> Model:
    """points: devices -> measured throughput (img/s, all devices). With bandwidth and latency
    given (a cluster profile), only the compute time is fitted."""
    if not points:
        raise ValueError("no measurements to fit the scaling model to")
    import numpy as np  # here, not at the top: scipy costs every `suite` command half a second to import
    from scipy.optimize import nnls

    devices = sorted(points)
    steps = np.array([n * batch_per_device / points[n] for n in devices])
    traffic = np.array([exchange.traffic(n) for n in devices])
    if bandwidth_gbit_s is not None and latency_us is not None:
        per_byte, latency = 8 / (bandwidth_gbit_s * 1e9), latency_us * 1e-6
        compute = float(np.mean(steps - traffic[:, 0] * per_byte - traffic[:, 1] * latency))
        if compute <= 0:
            raise ValueError(f"at {bandwidth_gbit_s:g} Gbit/s and {latency_us:g} us per hop the exchange alone "
                             f"outlasts the measured steps on {', '.join(map(str, devices))} devices: these network "
                             "figures do not describe these runs (--fit-network fits them to the runs instead)")
        return Model(exchange, batch_per_device, compute, per_byte, latency, tuple(devices))
    columns = [np.ones(len(devices))] + [traffic[:, i] for i in (0, 1) if traffic[:, i].any()]
    solution, _ = nnls(np.column_stack(columns), steps)
    if solution[0] <= 1e-9 * steps.max():  # none, to the fit's rounding
        raise ValueError(f"the fit on {', '.join(map(str, devices))} devices leaves no compute time in a step: "
                         "measurements at fewer devices (one) are needed to separate compute from the exchange")
    coefficients = iter(solution[1:])
    per_byte = next(coefficients) if traffic[:, 0].any() else 0.0
    latency = next(coefficients) if traffic[:, 1].any() else 0.0
    return Model(exchange, batch_per_device, float(solution[0]), float(per_byte), float(latency), tuple(devices))


@dataclass(frozen=True)
class Measurements:
    """Throughput by device count for one configuration, and where it came from; the parameters its records
    trained (None: published figures, the case's [scaling] count)."""

    points: dict[int, float]
    batch_per_device: int
    devices_per_node: int
    source: str
    parameters: int | None = None


def exchange_for(case_spec: dict, data: Measurements) -> Exchange:
    """The exchange of the case's [scaling] table, of the gradient of the model the measurements trained (a
    case's --model may not be the one [scaling] counts)."""
    scaling = case_spec.get("scaling")
    if not scaling:
        raise ValueError(f"case {case_spec['name']} has no [scaling] table (exchange, parameters) in its case.toml")
    if scaling["exchange"] not in EXCHANGES:
        raise ValueError(f"case {case_spec['name']}: [scaling] exchange must be one of {', '.join(EXCHANGES)}")
    gradient = (data.parameters or scaling["parameters"]) * scaling.get("bytes_per_parameter", 4)
    return Exchange(scaling["exchange"], gradient, data.devices_per_node)


def from_reference(reference: dict) -> Measurements:
    return Measurements(dict(zip(reference["devices"], reference["throughput"])), reference["batch_per_device"],
                        reference.get("devices_per_node", 1), f"published: {reference['source']}")


def from_points(points) -> Measurements:
    """suite.records.read.Point objects of one configuration (the latest per device count counts)."""
    by_devices = latest(points, lambda p: p.devices)
    first = next(iter(by_devices.values()))
    per_node = max(p.devices // p.nodes for p in by_devices.values())
    return Measurements({n: p.throughput["mean"] for n, p in by_devices.items()},
                        first.record["config"]["batch_per_device"], per_node,
                        f"{len(by_devices)} record(s) of {first.case} on {first.cluster} ({first.config_label})",
                        first.record["config"].get("parameters"))
