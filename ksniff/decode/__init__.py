"""Decode room: reassembled streams into Kafka exchanges (request + response) and record batch headers."""
