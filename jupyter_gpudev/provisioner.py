"""The ``gpudev`` kernel provisioner's public dotted path.

The entry point ``jupyter_gpudev.provisioner:GPUDevProvisioner`` and kernelspecs written before
the code moved into :mod:`jupyter_gpudev.kernels` name this module; the class lives in
:mod:`jupyter_gpudev.kernels.provisioner`.
"""

from .kernels.provisioner import GPUDevProvisioner

__all__ = ["GPUDevProvisioner"]
