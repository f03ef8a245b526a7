"""Step 6's model of the steps: frames, critical paths, the context its causes read."""
