"""A record's work and how close it came to the hardware: FLOPs per sample (as the case counted or
looked them up), achieved FLOP/s in total and per device, and the model FLOPs utilisation (MFU)
against the device's datasheet dense peak (suite/analysis/peaks.py) and against the matmul peak each
rank measured before its timed window. Reads records only; None where the case reported no work."""

import statistics

from suite.analysis.peaks import datasheet_peak, precision_of
from suite.instack.model_flops import training_flops_per_image

REFERENCE_PRECISIONS = {"amp": "fp16", "fp16": "fp16", "bf16": "bf16", "tf32": "tf32", "fp32": "fp32"}


def utilisation(record: dict) -> dict | None:
    """metrics.utilisation of a record whose repetitions carry the case's `work` (and `peaks`)."""
    work = next((r["work"] for r in record.get("repetitions", []) if r.get("work")), None)
    throughput = record["metrics"]["throughput"]
    if not work or not work.get("flops_per_sample") or not throughput.get("mean"):
        return None
    config = record["config"]
    device_name = device_name_of(record)
    precision = work.get("precision") or precision_of(config.get("dtype"), device_name)
    per_sample = work["flops_per_sample"]
    per_device = throughput["per_device"] * per_sample
    sheet = datasheet_peak(device_name, precision)
    measured = measured_peak(record)
    return {
        "flops_per_sample": per_sample,
        "flops_source": work.get("source"),
        "flops_per_step": per_sample * config["global_batch"] if config.get("global_batch") else None,
        "precision": precision,
        "achieved_flops_per_s": throughput["mean"] * per_sample,
        "achieved_flops_per_s_per_device": per_device,
        "datasheet_part": sheet["part"] if sheet else None,
        "datasheet_peak_flops_per_s": sheet["flops_per_s"] if sheet else None,
        "datasheet_source": sheet["source"] if sheet else None,
        "mfu_datasheet": _ratio(per_device, sheet and sheet["flops_per_s"]),
        "measured_peak_flops_per_s": measured["flops_per_s"] if measured else None,
        "measured_peak": measured,
        "mfu_measured": _ratio(per_device, measured and measured["flops_per_s"]),
    }


def device_name_of(record: dict) -> str | None:
    """The device name the case reported, else on GPUs the first GPU nvidia-smi listed on the hosts
    (MXNet has no call that names its GPU)."""
    reported = (record["config"].get("reported_by_case") or {}).get("device_name")
    if reported or record["world"].get("device_type") != "cuda":
        return reported
    hosts = (record["provenance"].get("host_info") or {}).values()
    return next((gpu.get("name") for info in hosts if isinstance(info, dict) for gpu in info.get("gpus") or []), None)


def measured_peak(record: dict) -> dict | None:
    """The ranks' measured matmul peaks per device: their mean (what MFU is set against), lowest,
    highest, and how they were measured (precision, matrix side, seconds)."""
    lines = [p for r in record.get("repetitions", []) for p in r.get("peaks") or [] if p.get("flops_per_s")]
    if not lines:
        return None
    rates = [p["flops_per_s"] for p in lines]
    return {"flops_per_s": statistics.fmean(rates), "min": min(rates), "max": max(rates), "ranks": len(lines),
            "precision": lines[0].get("precision"), "matrix": lines[0].get("matrix"),
            "seconds": lines[0].get("seconds")}


def reference_mfu(ref: dict) -> list[float] | None:
    """The MFU of each point of a published figure (a case's [[reference]] table) against its GPU's
    datasheet peak at its precision, where its work per sample is known (`flops_per_sample`, or the
    count of its `model` at its `image_size`) and its GPU is listed; else None."""
    per_sample = ref.get("flops_per_sample")
    if not per_sample and (found := training_flops_per_image(ref.get("model") or "", ref.get("image_size") or 0)):
        per_sample = found[0]
    peak = datasheet_peak(ref.get("gpu"), REFERENCE_PRECISIONS.get(ref.get("precision") or ""))
    if not per_sample or not peak or not ref.get("throughput"):
        return None
    return [round(rate / devices * per_sample / peak["flops_per_s"], 4)
            for devices, rate in zip(ref["devices"], ref["throughput"])]


def reference_mfu_at(ref: dict, devices: int) -> float | None:
    """A published figure's MFU at that device count, else at its first."""
    found = reference_mfu(ref)
    return found[ref["devices"].index(devices) if devices in ref["devices"] else 0] if found else None


def _ratio(achieved: float, peak: float | None) -> float | None:
    return achieved / peak if peak else None  # unrounded: a tiny run's share is small, never 0


def tflops(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e12:.3g} TFLOP/s"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def mfu_cell(found: dict | None) -> str:
    """The report's MFU column: against the datasheet where the part is listed, and the measured peak."""
    if not found:
        return "-"
    parts = []
    if found.get("mfu_datasheet") is not None:
        parts.append(f"{percent(found['mfu_datasheet'])} of {found['datasheet_part']} {found['precision']}")
    if found.get("mfu_measured") is not None:
        parts.append(f"{percent(found['mfu_measured'])} of measured matmul")
    return "; ".join(parts) or "-"


def summary_line(found: dict) -> str:
    per_sample = found["flops_per_sample"]
    line = (f"work: {per_sample / 1e9:.3g} GFLOP per sample per training step; achieved "
            f"{tflops(found['achieved_flops_per_s'])} ({tflops(found['achieved_flops_per_s_per_device'])} per device)")
    if found.get("mfu_datasheet") is not None:
        line += (f"; MFU {percent(found['mfu_datasheet'])} of the {found['datasheet_part']} datasheet's "
                 f"{tflops(found['datasheet_peak_flops_per_s'])} {found['precision']}")
    if found.get("mfu_measured") is not None:
        line += (f"; {percent(found['mfu_measured'])} of the measured {found['precision']} matmul peak "
                 f"{tflops(found['measured_peak_flops_per_s'])}")
    return line
