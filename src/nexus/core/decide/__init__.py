"""The decision core: one small pure module per concern, folded over a batch into a `BatchPlan`.

Deciders, each with its part of the decision table in its docstring: `position` (sequencing, the reorder
buffer), `replan` (plan swap), `validation` (the process), `rejections` (max_rejections), `approvals`,
`deadlines`, `effects` (saga steps), `outcomes` (a saga call's outcome as a command), `expiry` (the
buffer's timeout), `plan_start` (a plan started before its first step), `plan_end` (its abort or replan
completed under the lock). `order` folds one order's steps through them; `plan` folds a whole batch into a
`BatchPlan` (`answers`, `rows`, `log` build its parts); `items` is what a batch is made of; `isolation`
(with `refusals`) is how a failed batch is split and what a request it isolates becomes. See
docs/architecture.md, "Where each decision lives".
"""
