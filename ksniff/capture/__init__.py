"""Capture room: capture files and live interfaces into reassembled TCP streams with gap events."""

from ksniff.capture.errors import CaptureError, CaptureLimits
from ksniff.capture.reassembly import Reassembler
from ksniff.capture.run import CaptureRun, iter_segments, read_files

__all__ = ["CaptureError", "CaptureLimits", "CaptureRun", "Reassembler", "iter_segments", "read_files"]
