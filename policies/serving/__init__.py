"""The serving-engine replay (issue 11): requests in flight through a vLLM v1-style block pool
and scheduler (or SGLang's radix cache), the replacement policy ordering the evictable blocks.

Top layer of the policy engine (beside registry, sweep, demo, claims): nothing below imports it.
"""
