"""kmemscope's version: a leaf module that imports nothing, so every layer may read it."""

__version__ = "0.3.0"
