"""Audit room: a pure fold over decoded exchanges into producer timelines, transactions and findings."""
