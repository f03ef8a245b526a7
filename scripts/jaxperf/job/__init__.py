"""The runner of investigate.py's steps, each a child process."""
