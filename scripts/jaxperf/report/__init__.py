"""A report's grammar as the fact check reads it; the pictures' SVG."""
