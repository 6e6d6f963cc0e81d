"""Sagas: the effects of process steps, recorded with the decisions (`nexus.store.sagas`), performed by
executors (`executor`), their outcomes written back under the order's lock (`outcomes`)."""
