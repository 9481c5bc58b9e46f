"""The Redis contract the gateway and the worker share: the keys, the entries and the publisher
(docs/events.md)."""
