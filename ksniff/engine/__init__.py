"""Engines: run capture -> decode -> audit over inputs, in-process or on Spark, into one AuditResult."""
