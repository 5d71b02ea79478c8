"""The PyTorch cases' ResNet-50 v1.5 (cases/_shared/torch_resnet.py) equals torchvision's resnet50(): parameter
count, every state_dict shape, every layer's settings and the same outputs for the same weights (reference taken
from torchvision 0.28.0 by tools/torchvision_reference.py)."""

import json
import subprocess

import pytest
from conftest import ROOT

CHECK = """
import json, sys
sys.path[:0] = [".", "tools"]
from cases._shared.torch_resnet import resnet50
from torchvision_reference import describe
json.dump(describe(resnet50()), sys.stdout)
"""


def test_resnet50_equals_torchvision(pytorch_stack):
    reference = json.loads((ROOT / "tests" / "data" / "torchvision_resnet50.json").read_text())
    out = subprocess.run([str(pytorch_stack.python), "-c", CHECK], cwd=ROOT, capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout)
    assert ours["parameters"] == reference["parameters"] == 25_557_032
    assert ours["state_dict"] == reference["state_dict"]
    assert ours["leaf_modules"] == reference["leaf_modules"]
    # v1.5: the stride of a downsampling block sits on its 3x3 convolution.
    assert "stride=(2, 2)" in ours["leaf_modules"]["layer2.0.conv2"]
    assert "stride=(1, 1)" in ours["leaf_modules"]["layer2.0.conv1"]
    for ours_row, ref_row in zip(ours["probe_logits"], reference["probe_logits"]):
        assert ours_row == pytest.approx(ref_row, rel=1e-4, abs=1e-4)
