"""Runtimes: where a stack's programs come from (a local virtual environment, a site's modules, a container
image), one module each, found by name (the contract: suite/execution/plugins.py, Runtime)."""
