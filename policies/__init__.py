"""The SITS policy engine: KV-cache block traces, replacement policies, miss-ratio curves."""
