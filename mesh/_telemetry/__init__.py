"""What the process tells about itself: ``metrics`` (the tallies the call path adds to)
and ``tracing`` (OpenTelemetry spans, off unless configured). Nothing loads here, so
importing one does not load the other."""
