"""A record's work and how close it came to the hardware: FLOPs per sample (as the case counted or
looked them up), achieved FLOP/s in total and per device, and the model FLOPs utilisation (MFU)
against the device's datasheet dense peak (suite/analysis/peaks.py) and against the matmul peak each
rank measured before its timed window. Reads records only; None where the case reported no work."""

import statistics

from suite.analysis.peaks import DATASHEET, datasheet_peak, part_of, precision_of
from suite.instack.model_flops import training_flops_per_image

REFERENCE_PRECISIONS = {"amp": "fp16", "fp16": "fp16", "bf16": "bf16", "tf32": "tf32", "fp32": "fp32"}
MFU_AGAINST = (("mfu_datasheet", "datasheet peak"), ("mfu_measured", "measured matmul peak"))


def utilisation(record: dict) -> dict | None:
    """metrics.utilisation of a record whose repetitions carry the case's `work` (and `peaks`)."""
    work = next((r["work"] for r in record.get("repetitions", []) if r.get("work")), None)
    throughput = record["metrics"]["throughput"]
    if not work or not work.get("flops_per_sample") or not throughput.get("mean"):
        return None
    device_name = device_name_of(record)
    precision = precision_on(device_name, work.get("precision") or precision_of(record["config"].get("dtype"),
                                                                                device_name))
    per_sample = work["flops_per_sample"]
    per_device = throughput["per_device"] * per_sample
    sheet = datasheet_peak(device_name, precision)
    measured = measured_peak(record)
    step = samples_per_step(record)
    found = {
        "flops_per_sample": per_sample,
        "sample": "token" if throughput.get("unit") == "tokens/s" else "sample",
        "flops_source": work.get("source"),
        "flops_per_step": per_sample * step if step else None,
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
    return {**found, **validity(found)}


def samples_per_step(record: dict) -> float | None:
    """The samples of one step of all devices, in the unit the throughput counts (and the FLOPs per
    sample are per): tokens for a case measured in tokens/s, else config.global_batch."""
    if (record["metrics"].get("throughput") or {}).get("unit") == "tokens/s":
        return (record["config"].get("reported_by_case") or {}).get("global_tokens_per_step")
    return record["config"].get("global_batch")


def precision_on(device_name: str | None, precision: str | None) -> str | None:
    """tf32 on a listed part without TF32 (a V100: the flags allow it, the GPU has none) runs as fp32."""
    part = part_of(device_name)
    if precision == "tf32" and part and "tf32" not in DATASHEET[part]:
        return "fp32"
    return precision


def validity(found: dict) -> dict:
    """{valid, invalid_reason}: an MFU above 1 cannot be (more work per second than the peak it is set
    against): the FLOPs per sample or the peak is wrong, and the record's utilisation is not plotted."""
    over = [f"MFU {found[key]:.2f} against the {against}" for key, against in MFU_AGAINST if (found[key] or 0) > 1]
    if not over:
        return {"valid": True, "invalid_reason": None}
    return {"valid": False, "invalid_reason": "; ".join(over) + ": above 1, so the FLOPs per sample ("
            f"{found['flops_source']}) or the peak is wrong"}


def is_valid(found: dict | None) -> bool:
    """Whether a record's utilisation may be shown as a figure (older records have no `valid`: they are)."""
    return bool(found) and found.get("valid", True)


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
    if not is_valid(found):
        return f"invalid: {found['invalid_reason']}"
    parts = []
    if found.get("mfu_datasheet") is not None:
        parts.append(f"{percent(found['mfu_datasheet'])} of {found['datasheet_part']} {found['precision']}")
    if found.get("mfu_measured") is not None:
        parts.append(f"{percent(found['mfu_measured'])} of measured matmul")
    return "; ".join(parts) or "-"


def summary_line(found: dict) -> str:
    """The run summary's line: the work, the achieved FLOP/s, and each MFU beside the peak it is set
    against (as torchtitan and Megatron-LM print it), or why the figures are invalid."""
    line = (f"work: {found['flops_per_sample'] / 1e9:.3g} GFLOP per {found.get('sample', 'sample')} per training "
            f"step; achieved "
            f"{tflops(found['achieved_flops_per_s'])} ({tflops(found['achieved_flops_per_s_per_device'])} per device)")
    if not is_valid(found):
        return f"{line}; MFU invalid: {found['invalid_reason']}"
    if found.get("mfu_datasheet") is not None:
        line += (f"; MFU {percent(found['mfu_datasheet'])} of the {found['datasheet_part']} datasheet's "
                 f"{found['precision']} peak {tflops(found['datasheet_peak_flops_per_s'])}")
    if found.get("mfu_measured") is not None:
        line += (f"; MFU {percent(found['mfu_measured'])} of the measured {found['precision']} matmul peak "
                 f"{tflops(found['measured_peak_flops_per_s'])}")
    return line
