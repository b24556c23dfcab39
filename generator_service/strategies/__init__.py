"""Test-generation strategies behind one ask/tell interface (see base.py)."""

from generator_service.strategies.base import Result, Strategy, make_strategy, strategies

__all__ = ["Result", "Strategy", "make_strategy", "strategies"]
