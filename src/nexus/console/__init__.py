"""The web console at /console: server-rendered pages over the gateway's tables."""
