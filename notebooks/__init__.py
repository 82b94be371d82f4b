"""kmemscope.notebooks: the report notebooks, shipped as package data."""
