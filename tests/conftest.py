"""Puts tests/ on sys.path (pytest's rootdir conftest) so tests can import ``shared_fixtures``."""
