"""An HLO program: its schedules, source frames and text."""
