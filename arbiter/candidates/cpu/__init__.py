"""Candidates of the ``cpu`` target, one module each (every module here is imported on first use)."""
