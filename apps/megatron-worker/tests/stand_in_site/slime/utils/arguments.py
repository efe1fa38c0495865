"""slime.utils.arguments: `parse_args` of the stand-in (tests/process_stand_in.py)."""

from tests.process_stand_in import parse_args

__all__ = ["parse_args"]
