"""One compiled program (``xla.HloModuleProto``) as plain lookups: computations, instructions,
schedule order, while-loop trip counts, and each instruction's Python source frames.

Source frames come from whichever the program fills (handle every combination):
- ``OpMetadata.stack_frame_id`` through the module's ``stack_frame_index`` (jax 0.10.2 fills
  only this): a chain from the innermost frame outward via ``parent_frame_id``; ids are 1-based,
  0 = none;
- ``OpMetadata.source_file`` / ``source_line`` (older jax): one frame;
- a fusion whose own metadata is empty takes its frames from its fused instructions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

try:
    from trace_rules import NO_LAUNCH_OPCODES  # noqa: F401  (re-exported: one home)
except ImportError:  # imported without an entry script's path set-up: find the sibling skill
    import sys
    from pathlib import Path
    _here = Path(__file__).resolve().parent
    sys.path.extend(str(p) for p in (_here.parent / "analyzing-jax-launch-overhead" / "scripts",
                                     _here.parent.parent / "analyzing-jax-launch-overhead" /
                                     "scripts") if (p / "trace_rules.py").is_file())
    from trace_rules import NO_LAUNCH_OPCODES  # noqa: F401

from xprotos import PRIMITIVE_TYPES

# The default "user code" frame: the first frame outside site-packages and jax itself.
LIBRARY_FRAME_RE = re.compile(r"(site-packages|dist-packages)/|/jax/|/jaxlib/|^<frozen ")


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class Program:
    def __init__(self, module, program_id: int | None = None):
        self.module = module
        self.id = module.id if program_id is None else program_id
        self.name = module.name
        self.computations = {c.id: c for c in module.computations}
        self.instructions = {}
        self.computation_of = {}
        for comp in module.computations:
            for ins in comp.instructions:
                self.instructions[ins.id] = ins
                self.computation_of[ins.id] = comp.id
        self.by_name = {ins.name: ins for ins in self.instructions.values()}
        self.entry_id = module.entry_computation_id
        sfi = module.stack_frame_index
        self._files = list(sfi.file_names)
        self._functions = list(sfi.function_names)
        self._locations = list(sfi.file_locations)
        self._frames = list(sfi.stack_frames)
        self._stacks: dict[int, list[Frame]] = {}

    def schedule(self, computation_id: int) -> list:
        """Instructions of a computation in execution order (the schedule), else stored order."""
        seq = self.module.schedule.sequences.get(computation_id)
        if seq is not None and seq.instruction_ids:
            return [self.instructions[i] for i in seq.instruction_ids if i in self.instructions]
        return list(self.computations[computation_id].instructions)

    @staticmethod
    def trip_count(ins) -> int | None:
        """``known_trip_count`` of a while instruction's backend_config, when present."""
        if ins.opcode != "while" or not ins.backend_config:
            return None
        try:
            cfg = json.loads(ins.backend_config)
            return int(cfg["known_trip_count"]["n"])
        except (ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def dtype(ins) -> str:
        return PRIMITIVE_TYPES.get(ins.shape.element_type, f"type{ins.shape.element_type}")

    def stack(self, frame_id: int) -> list[Frame]:
        """The frames from ``frame_id`` outward (innermost first); [] when none (memoized:
        instructions share frames)."""
        memo = self._stacks.get(frame_id)
        if memo is None:
            memo = self._stacks[frame_id] = self._stack(frame_id)
        return memo

    def _stack(self, frame_id: int) -> list[Frame]:
        out = []
        seen = set()
        while 0 < frame_id <= len(self._frames) and frame_id not in seen:
            seen.add(frame_id)
            fr = self._frames[frame_id - 1]
            loc_id = fr.file_location_id
            if 0 < loc_id <= len(self._locations):
                loc = self._locations[loc_id - 1]
                file = self._files[loc.file_name_id - 1] if 0 < loc.file_name_id <= len(
                    self._files) else ""
                func = self._functions[loc.function_name_id - 1] if 0 < loc.function_name_id \
                    <= len(self._functions) else ""
                out.append(Frame(file, loc.line, func))
            frame_id = fr.parent_frame_id
        return out

    def frames(self, ins) -> list[Frame]:
        """Source frames of an instruction (innermost first), looking into fusions if needed."""
        md = ins.metadata
        if md.stack_frame_id:
            frames = self.stack(md.stack_frame_id)
            if frames:
                return frames
        if md.source_file:
            return [Frame(md.source_file, md.source_line, "")]
        if ins.opcode == "fusion":
            for comp_id in ins.called_computation_ids:
                comp = self.computations.get(comp_id)
                if comp is None:
                    continue
                for inner in reversed(comp.instructions):  # the root is stored last
                    frames = self.frames(inner)
                    if frames:
                        return frames
        return []

    def user_frame(self, ins, user_re: re.Pattern | None = None) -> Frame | None:
        """The first frame that counts as user code (``user_re`` matches its file), if any."""
        for fr in self.frames(ins):
            if user_re is not None:
                if user_re.search(fr.file):
                    return fr
            elif not LIBRARY_FRAME_RE.search(fr.file):
                return fr
        return None
