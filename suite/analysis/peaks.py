"""Datasheet dense peaks of the accelerators users train on, per precision, in FLOP/s per device (what
one framework device is: a GPU, or one of an MI250X's two dies), matched by the device name a case
reports (torch.cuda.get_device_name, TensorFlow's device details, nvidia-smi). Dense: without the
2:4 structured sparsity that datasheets quote beside (and often instead of) these figures; where a
sheet gives only sparse figures, half of them.

Sources (vendor datasheets and product pages, read 2026-11):
- NVIDIA H100 Tensor Core GPU datasheet (SXM5, PCIe, NVL columns), nvidia.com/en-us/data-center/h100/
- NVIDIA H200 Tensor Core GPU datasheet (H200 SXM, H200 NVL), nvidia.com/en-us/data-center/h200/
- NVIDIA GH200 Grace Hopper Superchip datasheet, nvidia.com/en-us/data-center/grace-hopper-superchip/
- NVIDIA A100 Tensor Core GPU datasheet (40 GB and 80 GB, SXM4 and PCIe: the same peaks),
  nvidia.com/en-us/data-center/a100/
- NVIDIA Tesla V100 datasheet (SXM2, PCIe; V100S PCIe), nvidia.com/en-us/data-center/v100/
- NVIDIA L40S datasheet, nvidia.com/en-us/data-center/l40s/
- NVIDIA HGX B200 datasheet, per GPU (the 8-GPU figures / 8), nvidia.com/en-us/data-center/hgx/
- AMD Instinct MI250X product page (per module of two dies; a framework sees each die as a device,
  so the figures here are per die: half), amd.com/en/products/accelerators/instinct/mi200/mi250x.html
- AMD Instinct MI300X product page, amd.com/en/products/accelerators/instinct/mi300/mi300x.html
"""

import re

TERA = 1e12

# name -> precision -> dense peak in TFLOP/s per device. fp64: the sheet's matrix rate (NVIDIA's FP64
# Tensor Core, AMD's FP64 matrix); fp32: NVIDIA's FP32 (it has no FP32 tensor core rate), AMD's FP32
# matrix rate; tf32, bf16, fp16, fp8: the matrix engines'.
DATASHEET = {
    "H100 SXM": {"fp64": 67, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "H100 PCIe": {"fp64": 51, "fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756, "fp8": 1513},
    "H100 NVL": {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
    "H200 SXM": {"fp64": 67, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "H200 NVL": {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
    "GH200": {"fp64": 67, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "A100": {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
    "V100 SXM2": {"fp64": 7.8, "fp32": 15.7, "fp16": 125},
    "V100 PCIe": {"fp64": 7, "fp32": 14, "fp16": 112},
    "V100S PCIe": {"fp64": 8.2, "fp32": 16.4, "fp16": 130},
    "L40S": {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733},
    "B200": {"fp64": 37, "fp32": 75, "tf32": 1125, "bf16": 2250, "fp16": 2250, "fp8": 4500},
    "MI250X (one die)": {"fp64": 47.85, "fp32": 47.85, "bf16": 191.5, "fp16": 191.5},
    "MI300X": {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
}

# Patterns over the reported name, first match wins (GH200 before H200, NVL and PCIe before the SXM
# part that a bare "H100" names: "NVIDIA H100 80GB HBM3" is the SXM module).
NAMES = [
    (r"GH200", "GH200"),
    (r"H200\s*NVL", "H200 NVL"),
    (r"H200", "H200 SXM"),
    (r"H100\s*NVL", "H100 NVL"),
    (r"H100.*PCI", "H100 PCIe"),
    (r"H100", "H100 SXM"),
    (r"A100", "A100"),
    (r"V100S", "V100S PCIe"),
    (r"V100.*PCI", "V100 PCIe"),
    (r"V100", "V100 SXM2"),
    (r"L40S", "L40S"),
    (r"(?<![A-Z])B200", "B200"),
    (r"MI250", "MI250X (one die)"),
    (r"MI300X", "MI300X"),
]
SOURCE = "datasheet dense peak ({part}, {precision}), suite/analysis/peaks.py"


def part_of(device_name: str | None) -> str | None:
    """The datasheet part a reported device name is, or None (CPUs, parts not listed)."""
    for pattern, part in NAMES:
        if device_name and re.search(pattern, device_name, re.IGNORECASE):
            return part
    return None


def datasheet_peak(device_name: str | None, precision: str | None) -> dict | None:
    """{part, precision, flops_per_s, source} for a device and precision the table lists, else None."""
    part = part_of(device_name)
    tflops = DATASHEET.get(part, {}).get(precision or "")
    if tflops is None:
        return None
    return {"part": part, "precision": precision, "flops_per_s": tflops * TERA,
            "source": SOURCE.format(part=part, precision=precision)}


def precision_of(dtype: str | None, device_name: str | None) -> str | None:
    """The precision a record's dtype runs its matrix products in, where the case did not say:
    float16 and bfloat16 (amp or not) as named; float32 on a GPU with TF32 matrix engines is tf32 (the
    frameworks' default for convolutions from Ampere on), else fp32."""
    dtype = (dtype or "").removeprefix("amp-")
    if dtype in ("float16", "bfloat16"):
        return {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    if dtype != "float32":
        return None
    part = part_of(device_name)
    return "tf32" if part and "tf32" in DATASHEET[part] else "fp32"
