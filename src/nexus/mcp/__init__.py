"""The gateway as an MCP server (the official `mcp` SDK, its 2.x line): any MCP-capable agent proposes steps and reads
verdicts through tools, with no code of ours on its side.

- `server.py`: the tools and resources (names fixed by DESIGN.md), each a thin call of a `Backend`, and the
  results a model reads (`structuredContent`, `isError`, a text saying what to do next).
- `backend.py`: the `Backend` port. The gateway's own (nexus.ingress.mcp_api) calls the REST API's
  functions in process for `/mcp`; `nexus mcp --stdio` uses one that calls the REST API over HTTP.
- `asgi.py`: streamable HTTP, stateless, JSON responses, as an ASGI endpoint behind the API's
  authentication (so any process of `--workers N` answers any request), for clients of every protocol
  revision the SDK serves (2026-07-28, 2025-11-25, 2025-06-18), browser origins checked first.
"""
