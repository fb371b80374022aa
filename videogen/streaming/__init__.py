"""Streaming generation: `stream(spec)` yields `StreamChunk`s; `StreamControl` switches or stops it."""

from videogen.streaming.state import StreamChunk, StreamControl
from videogen.streaming.stream import StreamSpec, stream

__all__ = ["StreamChunk", "StreamControl", "StreamSpec", "stream"]
