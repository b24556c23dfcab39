"""Shared runtime of the Gauntlet services: generated stubs, parameter spaces, tensor codec, server bootstrap."""
