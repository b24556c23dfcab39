"""Gymnasium environments that Gauntlet ships itself (registered on import of their module)."""
