"""Each step's analysis, behind its door (the entry script of the same name in scripts/)."""
