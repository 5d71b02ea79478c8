"""The published figure a record stands beside: a case's [[reference]] tables that name a `gpu` (a
part of the GPU's name, e.g. "A100") and a `precision` (amp, tf32, fp32) are matched against the
record's device and dtype, and the record's img/s per device is set against the published one at the
same device count (else the published single-device figure). Reads records and case.toml only."""

from suite.records.read import case_references

PRECISIONS = {"amp": ("amp-",), "tf32": ("float32",), "fp32": ("float32",)}


def matching(record: dict) -> list[dict]:
    """The case's GPU references for the record's GPU and precision, best first (same device count)."""
    reported = record["config"].get("reported_by_case") or {}
    device, dtype = reported.get("device_name") or "", record["config"].get("dtype") or ""
    found = [ref for ref in case_references(record["case"])
             if ref.get("gpu") and ref["gpu"].lower() in device.lower()
             and dtype.startswith(PRECISIONS.get(ref.get("precision", ""), ("-",)))]
    return sorted(found, key=lambda ref: record["world"]["devices"] not in ref["devices"])


def per_device(ref: dict, devices: int) -> float:
    """The published img/s per device at that device count, else at the smallest one published."""
    at = ref["devices"].index(devices) if devices in ref["devices"] else 0
    return ref["throughput"][at] / ref["devices"][at]


def comparison(record: dict) -> dict | None:
    """{source, published per device, ratio} against the best matching reference, or None."""
    refs, measured = matching(record), record["metrics"]["throughput"].get("per_device")
    if not refs or not measured:
        return None
    ref = refs[0]
    published = per_device(ref, record["world"]["devices"])
    return {"source": ref["source"], "gpu": ref["gpu"], "precision": ref["precision"],
            "published_per_device": published, "ratio": round(measured / published, 3),
            "same_devices": record["world"]["devices"] in ref["devices"]}


def summary_line(found: dict) -> str:
    at = "" if found["same_devices"] else " (its 1-device figure)"
    return (f"published: {found['published_per_device']:,.0f} img/s per GPU, {found['source']}{at}: "
            f"this run {found['ratio']:.2f}x that")
