"""What a run records for the tools: verify's steps, draws and traces, digests, the recorder."""
