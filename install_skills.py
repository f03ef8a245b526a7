#!/usr/bin/env python3
"""Install the three skills of this bundle side by side in an agent's skills folder.

Usage:
    python3 install_skills.py SKILLS_DIR [--link] [--force]

Example:
    python3 install_skills.py ~/.claude/skills

Writes SKILLS_DIR/investigating-jax-traces/ (this checkout's SKILL.md, scripts/, references/,
requirements.txt), SKILLS_DIR/analyzing-jax-launch-overhead/ and
SKILLS_DIR/writing-trace-report-pages/. Each folder's name equals its skill's `name`, and the
cross-skill path `$B/../analyzing-jax-launch-overhead/...` resolves there.
--link makes symbolic links to this checkout instead of copies (edits show at once).
--force replaces skills already installed under those names; without it they are left alone.

Exit codes: 0 installed; 1 a target exists (use --force) or cannot be written; 2 usage.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
ROOT_NAME = "investigating-jax-traces"
# skill name -> (source folder, the entries of it that make the skill)
SKILLS = {
    ROOT_NAME: (ROOT, ("SKILL.md", "scripts", "references", "requirements.txt")),
    "analyzing-jax-launch-overhead": (ROOT / "analyzing-jax-launch-overhead", None),
    "writing-trace-report-pages": (ROOT / "writing-trace-report-pages", None),
}
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def install(dest: Path, link: bool, force: bool) -> list[Path]:
    targets = [dest / name for name in SKILLS]
    existing = [t for t in targets if t.exists() or t.is_symlink()]
    if existing and not force:
        raise FileExistsError(", ".join(str(t) for t in existing))
    dest.mkdir(parents=True, exist_ok=True)
    for name, (src, entries) in SKILLS.items():
        target = dest / name
        _remove(target)
        if entries is None:
            if link:
                target.symlink_to(src, target_is_directory=True)
            else:
                shutil.copytree(src, target, ignore=IGNORE)
            continue
        target.mkdir()
        for entry in entries:
            s = src / entry
            if not s.exists():
                continue
            if link:
                (target / entry).symlink_to(s, target_is_directory=s.is_dir())
            elif s.is_dir():
                shutil.copytree(s, target / entry, ignore=IGNORE)
            else:
                shutil.copy2(s, target / entry)
    return targets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("skills_dir", type=Path)
    ap.add_argument("--link", action="store_true", help="symlink instead of copying")
    ap.add_argument("--force", action="store_true", help="replace skills already installed")
    args = ap.parse_args(argv)
    try:
        targets = install(args.skills_dir.expanduser(), args.link, args.force)
    except FileExistsError as exc:
        print(f"install_skills: already installed: {exc}; pass --force to replace",
              file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"install_skills: cannot write {args.skills_dir}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    for t in targets:
        print(f"wrote {t}{' (links)' if args.link else ''}")
    print(f"Next: point your agent at {args.skills_dir}; it loads {ROOT_NAME} by its SKILL.md.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
