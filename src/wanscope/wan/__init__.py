"""The Wan2.1 text-to-video engine: config, DiT, text encoder, VAE, sampler, pipeline.

Importing a submodule other than ``config`` imports torch; the analysis side never does.
"""
