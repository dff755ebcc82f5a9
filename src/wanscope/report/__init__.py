"""Rendering of analysis results: terminal tables, JSON, HTML. Never computes."""
