"""Deliberately broken gateways, each a launcher that patches one guarantee away and runs `nexus`.

They live in the tests only: the chaos tests start them in place of `python -m nexus_cli` to prove each
scenario reports the violation its guarantee exists to prevent.
"""
