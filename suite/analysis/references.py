"""The published figure a record stands beside: a case's [[reference]] tables that name a `gpu` (the
GPU's model as its name writes it, e.g. "A100", "H100"; a whole word of the name, so "H200" is not a
GH200) and a `precision` (amp, tf32, fp32) are matched against the record's device and dtype. Where
a table also gives the `framework` and the `batch_per_device`, those rank the matches: the same
framework first, then the same batch, then the same device count. The record's img/s per device is
set against the published one at the same device count (else at the smallest one published), and
the line that shows it says what the figure is: its framework, data path, batch and device count.
Reads records and case.toml only."""

import re

from suite.analysis.utilisation import reference_mfu_at
from suite.records.read import case_references, record_frameworks

PRECISIONS = {"amp": ("amp-",), "tf32": ("float32",), "fp32": ("float32",)}


def record_framework(record: dict) -> str | None:
    """The framework that trained, from the versions the case reported."""
    return next((name for name, _ in record_frameworks(record)), None)


def names_gpu(device_name: str, gpu: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(gpu)}(?![A-Za-z0-9])", device_name, re.I) is not None


def matching(record: dict) -> list[dict]:
    """The case's references for the record's GPU and precision, best first."""
    reported = record["config"].get("reported_by_case") or {}
    device, dtype = reported.get("device_name") or "", record["config"].get("dtype") or ""
    found = [ref for ref in case_references(record["case"])
             if ref.get("gpu") and names_gpu(device, ref["gpu"])
             and dtype.startswith(PRECISIONS.get(ref.get("precision", ""), ("-",)))]
    framework, batch = record_framework(record), record["config"].get("batch_per_device")
    devices = record["world"]["devices"]

    def rank(ref: dict) -> tuple[bool, bool, bool]:
        return (bool(ref.get("framework")) and (ref["framework"] or "").lower() != (framework or "").lower(),
                bool(ref.get("batch_per_device")) and ref["batch_per_device"] != batch,
                devices not in ref["devices"])

    return sorted(found, key=rank)


def per_device(ref: dict, devices: int) -> tuple[float, int]:
    """The published img/s per device at that device count, else at the smallest one published; and
    the device count it is from."""
    at = ref["devices"].index(devices) if devices in ref["devices"] else 0
    return ref["throughput"][at] / ref["devices"][at], ref["devices"][at]


def comparison(record: dict) -> dict | None:
    """The best matching reference, what it is, its img/s per device and this run's ratio; or None."""
    refs, measured = matching(record), record["metrics"]["throughput"].get("per_device")
    if not refs or not measured:
        return None
    ref = refs[0]
    published, devices = per_device(ref, record["world"]["devices"])
    framework = record_framework(record)
    return {"source": ref["source"], "gpu": ref["gpu"], "precision": ref["precision"],
            "unit": record["metrics"]["throughput"].get("unit", "img/s"),
            "framework": ref.get("framework"), "data_path": ref.get("data_path"),
            "batch_per_device": ref.get("batch_per_device"), "devices": devices,
            "published_per_device": published, "ratio": round(measured / published, 3),
            "published_mfu": reference_mfu_at(ref, devices),
            "same_devices": record["world"]["devices"] in ref["devices"],
            "same_framework": None if not ref.get("framework") or not framework
            else ref["framework"].lower() == framework.lower(),
            "same_batch": None if not ref.get("batch_per_device")
            else ref["batch_per_device"] == record["config"].get("batch_per_device")}


def what_it_is(found: dict) -> str:
    """"per GPU of an 8-GPU MXNet + DALI run at batch 400" (as much of it as the table gives)."""
    tool = data_tool(found.get("data_path"))
    framework = found.get("framework")
    words = [f"{found['devices']}-GPU", framework, f"+ {tool}" if tool and framework else None]
    run = " ".join(filter(None, [*words, "run"]))
    article = "an" if re.match(r"(8\d*|11|18)\b|[aeiou]", run, re.I) else "a"  # an 8-GPU, a 4-GPU
    batch = f" at batch {found['batch_per_device']}" if found.get("batch_per_device") else ""
    data = f" on {found['data_path']}" if found.get("data_path") and not (tool and found.get("framework")) else ""
    return f"per GPU of {article} {run}{batch}{data}"


def data_tool(data_path: str | None) -> str | None:
    """The loader a data path names after "through" (e.g. DALI), for the short form of the line."""
    found = re.search(r"through (\w+)", data_path or "")
    return found.group(1) if found else None


def summary_line(found: dict) -> str:
    if "devices" not in found:  # a record written before the reference said what it is
        at = "" if found["same_devices"] else " (its 1-device figure)"
        return (f"published: {found['published_per_device']:,.0f} img/s per GPU, {found['source']}{at}: "
                f"this run {found['ratio']:.2f}x that")
    mfu = f", MFU {100 * found['published_mfu']:.0f}%" if found.get("published_mfu") else ""
    unit = found.get("unit", "img/s")
    return (f"published: {found['published_per_device']:,.0f} {unit} {what_it_is(found)} ({found['source']}{mfu}): "
            f"this run {found['ratio']:.2f}x that")
