"""What we make the hardware do: CUDA C probes (`kernels/*.cu`) and their CuPy launchers.

Everything here imports without a GPU: planning (`plan`) and post-processing (`analysis`)
are pure NumPy; the launchers (`gpu`, `suite`) import CuPy inside their functions.
"""
