"""The gateway side as a product: an ASGI middleware and an asynchronous, spooling publisher.

``middleware`` (the ASGI middleware) recognises chat-completion routes (``routes``), refuses what the
contract refuses (``refusals``), builds the request metadata from the gateway's hook (``metadata``),
prices the hold when the gateway gives none (``reservation``), and cuts the response body into the SSE
events the client received (``events``). It hands everything to the ``tee`` (``tee``), which writes it
to Redis from a background thread, and spools it to a local file (``spool``, framed by ``records``)
while Redis is away. ``metrics`` holds the tee's Prometheus metrics; ``example_app`` is a small
proxying gateway built on the middleware; ``litellm_hook`` is the LiteLLM proxy's hook, publishing
through the same tee. docs/gateway.md says how to add each.

Everything but ``middleware``'s ASGI plumbing and ``example_app`` is importable without Starlette.
"""
