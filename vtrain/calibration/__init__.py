"""Fitting the cost model's constants to measured data (kept apart from look-up and simulation)."""
