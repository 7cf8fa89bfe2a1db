"""Registers the energy accounting (``stats.energy``) and the power-cap options."""
