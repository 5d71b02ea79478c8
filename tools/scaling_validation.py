"""Rewrites the validation tables in docs/scaling.md from the current model (between the
<!-- validation:NAME --> markers); tests/unit/test_scaling.py fails when the doc and the model disagree."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.analysis.scaling_validation import validation_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "scaling.md"
VALIDATIONS = {
    "table8": ("mxnet-imagenet", "Table 8", 16),
    "table9": ("pytorch-synthetic", "Table 9", 8),
}


def render(text: str) -> str:
    for name, args in VALIDATIONS.items():
        block = f"<!-- validation:{name} -->\n{validation_table(*args)}\n<!-- /validation:{name} -->"
        pattern = rf"<!-- validation:{name} -->.*?<!-- /validation:{name} -->"
        text = re.sub(pattern, lambda _, block=block: block, text, flags=re.S)
    return text


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text()))
