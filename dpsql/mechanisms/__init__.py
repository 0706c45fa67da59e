"""Noise: exact samplers on a CSPRNG and the calibration formulas that go with them."""
