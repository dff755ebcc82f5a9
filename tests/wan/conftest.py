"""Registers the engine tests' fixtures (defined in wan_helpers.py beside the helpers they use)."""

from wan_helpers import diffusers_dit, diffusers_dit_dir, dit_inputs, official, official_dit_dir  # noqa: F401
