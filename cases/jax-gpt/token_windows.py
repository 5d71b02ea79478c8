"""pytorch-gpt's windows of the token file (cases/pytorch-gpt/windows.py: NumPy alone, torch only for its
`batches`), loaded from its file: the two cases read the same windows of the same file in the same order."""

import importlib.util
from pathlib import Path

_SOURCE = Path(__file__).resolve().parents[1] / "pytorch-gpt" / "windows.py"
_spec = importlib.util.spec_from_file_location("pytorch_gpt_windows", _SOURCE)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

TokenError = _module.TokenError
TokenWindows = _module.TokenWindows
