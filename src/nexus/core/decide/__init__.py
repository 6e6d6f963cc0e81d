"""The decision core: one small pure module per concern, folded over a batch into a `BatchPlan`."""
