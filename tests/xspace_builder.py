"""Build a small XSpace from Python values, for tests that need one behaviour in a capture.

    b = XSpaceBuilder(hostnames=["h"])
    gpu = b.plane("/device:GPU:0", stats={"device_vendor": "Nvidia"})
    s = gpu.line(7, "Stream #7(Kernel)", timestamp_ns=1000)
    s.event("fusion_1", offset_ps=5, duration_ps=10, stats={"hlo_op": ("ref", "fusion.1")})
    data = b.serialize()

Stat values: int -> int64_value, float -> double_value, str -> str_value, bytes -> bytes_value,
("ref", "text") -> ref_value pointing at a stat-metadata entry named "text",
("uint", n) -> uint64_value. Stats may be given as a list of (key, value) pairs to repeat a key.
"""

from __future__ import annotations

from jaxperf.read import xprotos


class _Plane:
    def __init__(self, proto):
        self.proto = proto
        self._stat_ids: dict[str, int] = {}
        self._event_ids: dict[str, int] = {}

    def stat_id(self, name: str) -> int:
        if name not in self._stat_ids:
            sid = len(self._stat_ids) + 1
            self._stat_ids[name] = sid
            md = self.proto.stat_metadata[sid]
            md.id = sid
            md.name = name
        return self._stat_ids[name]

    def add_stats(self, target, stats) -> None:
        items = stats.items() if isinstance(stats, dict) else stats
        for key, value in items:
            st = target.add()
            st.metadata_id = self.stat_id(key)
            if isinstance(value, tuple) and value[0] == "ref":
                st.ref_value = self.stat_id(value[1])
            elif isinstance(value, tuple) and value[0] == "uint":
                st.uint64_value = value[1]
            elif isinstance(value, bool) or isinstance(value, int):
                st.int64_value = int(value)
            elif isinstance(value, float):
                st.double_value = value
            elif isinstance(value, bytes):
                st.bytes_value = value
            else:
                st.str_value = str(value)

    def event_metadata(self, name: str, stats=None, metadata_id: int | None = None) -> int:
        if name in self._event_ids and metadata_id is None:
            return self._event_ids[name]
        mid = metadata_id if metadata_id is not None else len(self._event_ids) + 1
        self._event_ids[name] = mid
        md = self.proto.event_metadata[mid]
        md.id = mid
        md.name = name
        if stats:
            self.add_stats(md.stats, stats)
        return mid

    def line(self, line_id: int, name: str, timestamp_ns: int = 0, display_id: int = 0):
        ln = self.proto.lines.add()
        ln.id = line_id
        ln.display_id = display_id
        ln.name = name
        ln.timestamp_ns = timestamp_ns
        return _Line(self, ln)


class _Line:
    def __init__(self, plane: _Plane, proto):
        self.plane = plane
        self.proto = proto

    def event(self, name: str, offset_ps: int, duration_ps: int, stats=None):
        ev = self.proto.events.add()
        ev.metadata_id = self.plane.event_metadata(name)
        ev.offset_ps = offset_ps
        ev.duration_ps = duration_ps
        if stats:
            self.plane.add_stats(ev.stats, stats)
        return ev


class XSpaceBuilder:
    def __init__(self, hostnames=("testhost",)):
        self.proto = xprotos.classes()["XSpace"]()
        self.proto.hostnames.extend(hostnames)

    def plane(self, name: str, plane_id: int = 0, stats=None) -> _Plane:
        p = self.proto.planes.add()
        p.id = plane_id
        p.name = name
        plane = _Plane(p)
        if stats:
            plane.add_stats(p.stats, stats)
        return plane

    def hlo_program(self, module, metadata_id: int | None = None) -> None:
        """Store an HloModuleProto on /host:metadata as XLA does: `<name>(<id>)` -> `Hlo Proto`."""
        md = next((p for p in self.proto.planes if p.name == "/host:metadata"), None)
        plane = _Plane(md) if md is not None else self.plane("/host:metadata")
        if md is not None:  # re-register the names already used on that plane
            plane._stat_ids = {m.name: k for k, m in md.stat_metadata.items()}
        hlo = xprotos.classes()["HloProto"]()
        hlo.hlo_module.CopyFrom(module)
        plane.event_metadata(f"{module.name}({module.id})", stats={
            "Hlo Proto": hlo.SerializeToString()},
            metadata_id=module.id if metadata_id is None else metadata_id)

    def serialize(self) -> bytes:
        return self.proto.SerializeToString()

    def write(self, path) -> None:
        with open(path, "wb") as fh:
            fh.write(self.serialize())
