"""Request ids: fresh ones are 32 hex digits, never repeated, also not by a forked child of the process."""

from __future__ import annotations

import os

from nexus.error_shape import new_request_id, request_id_for


def test_fresh_request_ids_are_distinct_hex_and_a_forked_child_does_not_repeat_its_parent() -> None:
    """Ids come from a seeded generator rather than the OS each time: a child forked after the parent drew
    one must still draw ids of its own (the generator is reseeded after fork), or two processes of one
    serve would hand out the same ids."""
    ids = {new_request_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 32 and child != new_request_id()


def test_a_safe_caller_request_id_is_kept_and_anything_else_replaced() -> None:
    """The caller's X-Request-ID (the last one) is kept when it is a safe identifier; otherwise a new id."""
    scope = {"headers": [(b"x-request-id", b"first"), (b"x-request-id", b"abc-123")]}
    assert request_id_for(scope) == "abc-123"
    unsafe = request_id_for({"headers": [(b"x-request-id", b"bad id\n")]})
    assert unsafe != "bad id\n" and len(unsafe) == 32
