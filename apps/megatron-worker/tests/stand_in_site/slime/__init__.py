"""The stand-in slime (tests/slime_stand_in.py) as an importable package, for tests that start the
worker as a process exactly as `ray job submit` does: put `tests/stand_in_site` first on PYTHONPATH."""
