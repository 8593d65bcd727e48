"""The `sitsprof` command: wiring only; the logic lives in the other packages."""
