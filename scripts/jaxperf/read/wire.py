"""Protocol-buffer wire format decoded in bulk: many messages of one type, back to back in one
buffer, decoded a field at a time across all of them at once (numpy), never one Python object
per message.

A message is a run of fields, each a varint tag (field number << 3 | wire type) and a value: a
varint (wire type 0), 8 bytes (1), a varint length and that many bytes (2) or 4 bytes (5); the
group wire types (3, 4) are obsolete and never written by XLA. `fields` walks every message
in lockstep: round r holds the r-th field of each message that has one, so a message's fields
come in the order written and the last of a repeated singular field wins, as protobuf's own
parser has it. Anything else is a WireError (the bytes are corrupt).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

PAD = 16  # zero bytes after the buffer: a varint or fixed read near the end stays inside it


class WireError(ValueError):
    """The bytes are not protobuf wire format (a varint too long, a field past its message)."""


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each position: (values as uint64, the positions after them)."""
    b = buf[pos]
    if not pos.size or b.max() < 0x80:  # one byte each: the common case
        return b.astype(np.uint64), pos + 1
    val = (b & 0x7F).astype(np.uint64)
    nxt = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise WireError("a varint runs past ten bytes")
        q = nxt[more]
        b = buf[q]
        val[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        nxt[more] = q + 1
        more = more[(b & 0x80) != 0]
        shift += 7
    return val, nxt


def _fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The little-endian `width`-byte value at each position, as uint64."""
    val = np.zeros(pos.size, np.uint64)
    for k in range(width):
        val |= buf[pos + k].astype(np.uint64) << np.uint64(8 * k)
    return val


def fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Iterator[tuple]:
    """Walk the messages at [starts[i], ends[i]) of `buf` (padded) in lockstep. Yields one
    tuple per round: (message indices, field numbers, wire types, values, lengths): a varint's
    or a fixed field's value (uint64 bits); for a length-delimited field the position of its
    payload and its length (0 for the others). Indices, positions and lengths are int32."""
    end = buf.size - PAD
    if starts.size and (int(ends.max()) > end or bool((starts > ends).any())):
        raise WireError("a message runs past the buffer's end")
    # positions in int32 (a buffer is under 2 GiB): half the memory traffic of int64
    idx = np.flatnonzero(starts < ends).astype(np.int32)
    pos, stop = starts[idx].astype(np.int32), ends[idx].astype(np.int32)
    while idx.size:
        b = buf[pos]
        if b.max() < 0x80:  # one-byte tags (field numbers up to 15): the usual
            wt, number, p = b & 7, b >> 3, pos + 1
        else:
            tag, p = varints(buf, pos)
            tag = tag.astype(np.int64)
            wt, number, p = tag & 7, tag >> 3, p.astype(np.int32)
        kinds = np.bincount(wt, minlength=8)
        if kinds[3:5].any() or kinds[6:].any() or bool((number == 0).any()):
            raise WireError("a field has number 0 or a wire type protobuf does not write")
        val = np.zeros(idx.size, np.uint64)
        length = np.zeros(idx.size, np.int32)
        for kind in np.flatnonzero(kinds).tolist():
            m = np.flatnonzero(wt == kind) if kinds[kind] < idx.size else slice(None)
            q = p[m]
            if kind == 0:
                val[m], p[m] = varints(buf, q)
            elif kind == 2:
                n, q = varints(buf, q)
                if bool((n > np.uint64(end) - q.astype(np.uint64)).any()):
                    raise WireError("a field runs past the buffer's end")
                n = n.astype(np.int32)
                val[m], length[m], p[m] = q, n, q + n
            else:
                width = 8 if kind == 1 else 4
                val[m], p[m] = _fixed(buf, q, width), q + width
        if bool((p > stop).any()):
            raise WireError("a field runs past the end of its message")
        yield idx, number, wt, val, length
        left = p < stop
        if not left.all():
            idx, p, stop = idx[left], p[left], stop[left]
        pos = p


def signed(val: np.ndarray) -> np.ndarray:
    """uint64 bits as int64 (an int64 field's two's complement)."""
    return val.view(np.int64)


def spans(parts: list[bytes]) -> tuple[np.ndarray, bytes, np.ndarray, np.ndarray]:
    """Messages given as separate byte strings joined into one, padded: (the bytes as a uint8
    array, the bytes themselves, starts, ends). One copy of the bytes, not two."""
    lens = np.fromiter(map(len, parts), np.int64, len(parts))
    ends = np.cumsum(lens)
    data = b"".join(itertools.chain(parts, (bytes(PAD),)))
    return np.frombuffer(data, np.uint8), data, ends - lens, ends
