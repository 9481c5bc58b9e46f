"""The Redis and Celery edges: the gateway contract (keys, publisher), the consumer, the tasks."""
