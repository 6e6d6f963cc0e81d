"""HTTP API of the plan lifecycle (a FastAPI router the app includes; Database from app.state)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from nexus.ingress.http import OrderId, PlanId
from nexus.lifecycle.history import order_history, plan_history
from nexus.store.database import Database

router = APIRouter(tags=["lifecycle"])


@router.get("/v1/orders/{order_id}/history")
async def get_order_history(order_id: OrderId, request: Request) -> dict[str, Any]:
    """Every decision taken for the order, from the decision log, oldest first."""
    db: Database = request.app.state.db
    return {"order_id": order_id, "items": await order_history(db, order_id)}


@router.get("/v1/plans/{plan_id}/history")
async def get_plan_history(plan_id: PlanId, request: Request) -> dict[str, Any]:
    """Every decision taken for the plan's steps (its REPLAN included), from the decision log, oldest first."""
    db: Database = request.app.state.db
    return {"plan_id": plan_id, "items": await plan_history(db, plan_id)}
