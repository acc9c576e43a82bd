"""``python -m rbench.cli`` (and ``torchrun ... -m rbench.cli run ...``)."""

from rbench.cli.app import entry

entry()
