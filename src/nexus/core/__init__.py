"""The pure core: no I/O, no asyncio, no drivers. Functions take data (and `now`) and return frozen values."""
