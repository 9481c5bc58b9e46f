"""Gateway integrations: what a gateway runs to publish its calls to the billing contract."""
