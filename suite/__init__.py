"""Benchmark runner for distributed deep-learning training on HPC clusters.

Kept free of imports: case scripts import `suite.instack.probe` and `suite.instack.case_options` inside framework stacks
that do not have the runner's dependencies.
"""

__version__ = "0.1.0"
