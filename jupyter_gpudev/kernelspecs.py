"""The kernel spec manager's public dotted path.

Jupyter configuration names ``jupyter_gpudev.kernelspecs.GPUDevKernelSpecManager``; the class
lives in :mod:`jupyter_gpudev.kernels.kernelspecs`.
"""

from .kernels.kernelspecs import GPUDevKernelSpecManager

__all__ = ["GPUDevKernelSpecManager"]
