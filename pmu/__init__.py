"""What the hardware can tell us: device facts, the NVML session, clock locking, the counter
catalog, and the GPM / CUPTI PM-sampling backends. GPU libraries are imported lazily."""
