"""The consumer: its steps (intake, gathering, reconciling, applying, acknowledge), the sweeper,
partitions, the backlog, dead letters and salvage."""
