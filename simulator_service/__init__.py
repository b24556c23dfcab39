"""Simulator service: subjects, backends and the lock-step episode runner."""
