"""A GPU's own knowledge: its datasheet ceilings and how its device stats identify it."""
