#!/usr/bin/env python3
"""Write the scratch folder's layout document, rendered from its declarations
(tracekit/scratch.py), into a references folder: scratch-layout.md and one part per step in
scratch-layout/:

    python3 -P analyzing-jax-launch-overhead/scripts/scratch_layout.py references
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap: the tracekit package

from tracekit import scratch

if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: scratch_layout.py REFERENCES_FOLDER (an existing folder)", file=sys.stderr)
        raise SystemExit(2)
    for rel, text in scratch.render_layout().items():
        path = Path(sys.argv[1]) / rel
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
