"""What the measurements mean: distributions, calibration files, HTML."""
