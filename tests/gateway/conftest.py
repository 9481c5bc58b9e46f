"""LiteLLM is imported by the hook's tests: it must read its bundled model cost map, never the
network (the proxy processes get the same variable from tests/gateway/harness.py)."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
