"""`nexus serve --help` says what each way of running it runs."""

from __future__ import annotations

import argparse

from nexus.commands import configure_serve


def test_dispatcher_only_names_the_saga_executor_and_the_other_background_services() -> None:
    """`--dispatcher-only` runs more than the dispatcher: its help names the saga executor and the sweepers."""
    parser = argparse.ArgumentParser(prog="nexus serve")
    configure_serve(parser)
    [option] = [a for a in parser._actions if "--dispatcher-only" in a.option_strings]
    assert option.help is not None
    for service in ("webhook dispatcher", "saga executor", "sweepers", "no HTTP API"):
        assert service in option.help
