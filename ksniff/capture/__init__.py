"""Capture room: capture files and live interfaces into reassembled TCP streams with gap events."""
