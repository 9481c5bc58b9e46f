"""The workshop, outside the wheel: the demos, the private local servers, the recorded upstream and
the example gateway. Nothing in ``worker`` or ``models`` imports it."""
