"""Hooks."""
