"""What we make the hardware do: CUDA C probes (`kernels/*.cu`) and their CuPy launchers.

Everything here imports without a GPU: planning (`plan`) and the raw tables (`tables`) are
pure NumPy; the launchers (`gpu`, `suite`) import CuPy inside their functions. Probes write
raw tables only; what they mean (tiers, TLB steps, load levels) is derived in `sitsprof.reports`.
"""
