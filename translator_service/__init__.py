"""Translator service: image-to-image GANs (simulator image -> realistic image), loaded by name."""
