"""What the hardware can tell us: device facts, the NVML session, clock locking and the record
of what it locked, the counter catalog, and the GPM / CUPTI PM-sampling backends.

GPU libraries are imported lazily, so that a node without a GPU can still plan, report and
replay policies. This package imports nothing of sitsprof but `sitsprof.common`.
"""
