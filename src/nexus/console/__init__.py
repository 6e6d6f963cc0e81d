"""The web console at /console (issue 16): server-rendered pages over the gateway's tables."""
