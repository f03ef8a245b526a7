"""An instruction's FLOPs and bytes, custom calls' from their configs, the ceiling bounding it."""
