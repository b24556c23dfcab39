"""Gymnasium environments the simulator ships itself. A subject family's own env lives in its pack (subjects/<family>/
env.py), registered when its subject's ``env_id`` (``module:EnvId``) is made."""
