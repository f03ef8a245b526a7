#!/usr/bin/env python3
"""Print the scratch folder's layout document, rendered from its declarations
(tracekit/scratch.py):

    python3 -P analyzing-jax-launch-overhead/scripts/scratch_layout.py \
        > references/scratch-layout.md
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap: the tracekit package

from tracekit import scratch

if __name__ == "__main__":
    sys.stdout.write(scratch.render_layout())
