"""The consumer: its steps (``steps``: the interface; intake, gathering, reconciling, applying,
acknowledge), the sweeper, partitions, the backlog, dead letters and salvage."""
