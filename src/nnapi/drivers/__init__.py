"""Drivers shipped with nnapi; each registers in the `nnapi.drivers` entry-point group."""
