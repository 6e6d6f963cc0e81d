"""The shipped process definitions' shapes, generated from src/nexus/processes/*.yaml by `make schemas`
(nexus.core.schemas_export): do not edit. Read them through `nexus.core.definitions`."""

import json
from typing import Any

from nexus.core import merge_patch

# What the definitions share is written once: a definition as the patch of another, a part that stands
# in several places (a YAML anchor's schema) in SHARED and {"$shared": name} where it stands.
SHARED: dict[str, Any] = {}
DEFINITIONS: dict[str, dict[str, Any]] = {}


def _load(text: str) -> Any:
    return merge_patch.expand(json.loads(text), SHARED)


SHARED["total_amount"] = _load(r"""{
 "type": [
  "number",
  "string"
 ],
 "minimum": 0,
 "pattern": "^(\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?|-(0+(\\.0*)?|\\.0+)([eE][+-]?[0-9]+)?)$",
 "default": 0
}""")
SHARED["items"] = _load(r"""{
 "type": "object",
 "required": [
  "product_id",
  "quantity",
  "unit_price"
 ],
 "properties": {
  "product_id": {
   "type": "string",
   "minLength": 1,
   "maxLength": 200
  },
  "quantity": {
   "type": "integer",
   "exclusiveMinimum": 0,
   "maximum": 9223372036854775807,
   "x-json-integer": true
  },
  "unit_price": {
   "type": [
    "number",
    "string"
   ],
   "minimum": 0,
   "pattern": "^(\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?|-(0+(\\.0*)?|\\.0+)([eE][+-]?[0-9]+)?)$"
  }
 }
}""")
DEFINITIONS["order"] = _load(r"""{
 "name": "order",
 "version": 2,
 "description": "An e-commerce order, created, validated against inventory, paid, shipped and completed.",
 "states": [
  "created",
  "inventory_validated",
  "payment_processed",
  "shipped",
  "completed",
  "aborted"
 ],
 "terminal": [
  "completed",
  "aborted"
 ],
 "steps": {
  "OrderCreated": {
   "from": [
    null
   ],
   "to": "created",
   "data": {
    "type": "object",
    "properties": {
     "user_id": {
      "type": [
       "string",
       "null"
      ],
      "minLength": 1,
      "maxLength": 200
     },
     "items": {
      "type": "array",
      "default": [],
      "items": {
       "$shared": "items"
      }
     },
     "total_amount": {
      "$shared": "total_amount"
     },
     "currency": {
      "type": "string",
      "pattern": "^[A-Z]{3}$",
      "default": "USD"
     }
    }
   },
   "money": [
    "total_amount",
    "items.unit_price"
   ]
  },
  "InventoryValidated": {
   "from": [
    "created"
   ],
   "to": "inventory_validated",
   "data": {
    "type": "object",
    "properties": {
     "warehouse_id": {
      "type": [
       "string",
       "null"
      ],
      "minLength": 1,
      "maxLength": 200
     },
     "reserved_items": {
      "type": "array",
      "items": {
       "$shared": "items"
      }
     }
    }
   },
   "money": [
    "reserved_items.unit_price"
   ],
   "facts": [
    "warehouse_id",
    "reserved_items"
   ]
  },
  "PaymentProcessed": {
   "from": [
    "inventory_validated"
   ],
   "to": "payment_processed",
   "data": {
    "type": "object",
    "properties": {
     "payment_id": {
      "type": [
       "string",
       "null"
      ],
      "minLength": 1,
      "maxLength": 200
     },
     "amount": {
      "$shared": "total_amount"
     },
     "currency": {
      "type": "string",
      "pattern": "^[A-Z]{3}$",
      "default": "USD"
     },
     "method": {
      "type": [
       "string",
       "null"
      ],
      "minLength": 1,
      "maxLength": 200
     }
    }
   },
   "money": [
    "amount"
   ],
   "facts": [
    "payment_id",
    "amount",
    "method"
   ]
  },
  "OrderShipped": {
   "from": [
    "payment_processed"
   ],
   "to": "shipped",
   "data": {
    "type": "object",
    "properties": {
     "carrier": {
      "type": [
       "string",
       "null"
      ],
      "minLength": 1,
      "maxLength": 200
     },
     "tracking_number": {
      "type": [
       "string",
       "null"
      ],
      "minLength": 1,
      "maxLength": 200
     }
    }
   },
   "facts": [
    "carrier",
    "tracking_number"
   ]
  },
  "OrderCompleted": {
   "from": [
    "shipped"
   ],
   "to": "completed",
   "data": {
    "type": "object",
    "properties": {
     "completed_at": {
      "type": [
       "string",
       "null"
      ],
      "format": "date-time"
     }
    }
   },
   "facts": []
  }
 }
}""")
DEFINITIONS["fulfilment"] = merge_patch.apply(
    DEFINITIONS["order"],
    _load(r"""{
 "name": "fulfilment",
 "description": "An order whose inventory, payment, shipping and invoice are effects performed by the gateway.",
 "steps": {
  "InventoryValidated": {
   "money": null,
   "facts": [
    "warehouse_id"
   ]
  }
 }
}"""),
)
DEFINITIONS["order_reviewed"] = merge_patch.apply(
    DEFINITIONS["order"],
    _load(r"""{
 "name": "order_reviewed",
 "description": "An e-commerce order whose payments above 1000.00 wait for a person's approval."
}"""),
)
DEFINITIONS["refund"] = _load(r"""{
 "name": "refund",
 "version": 1,
 "description": "A refund request, approved automatically up to 100.00 or reviewed above it, then paid out.",
 "states": [
  "requested",
  "auto_approved",
  "under_review",
  "approved",
  "rejected",
  "paid",
  "aborted"
 ],
 "terminal": [
  "paid",
  "rejected",
  "aborted"
 ],
 "max_rejections": 3,
 "steps": {
  "RefundRequested": {
   "from": [
    null
   ],
   "to": "requested",
   "data": {
    "type": "object",
    "required": [
     "amount",
     "currency",
     "reason"
    ],
    "properties": {
     "amount": {
      "type": [
       "number",
       "string"
      ]
     },
     "currency": {
      "type": "string",
      "pattern": "^[A-Z]{3}$"
     },
     "reason": {
      "type": "string",
      "minLength": 1
     }
    }
   },
   "money": [
    "amount"
   ]
  },
  "RefundAutoApproved": {
   "from": [
    "requested"
   ],
   "to": "auto_approved"
  },
  "RefundReviewStarted": {
   "from": [
    "requested"
   ],
   "to": "under_review"
  },
  "RefundReviewApproved": {
   "from": [
    "under_review"
   ],
   "to": "approved",
   "data": {
    "type": "object",
    "required": [
     "reviewer"
    ],
    "properties": {
     "reviewer": {
      "type": "string",
      "minLength": 1
     }
    }
   }
  },
  "RefundReviewRejected": {
   "from": [
    "under_review"
   ],
   "to": "rejected"
  },
  "RefundPaid": {
   "from": [
    "auto_approved",
    "approved"
   ],
   "to": "paid",
   "money": [
    "amount"
   ]
  }
 }
}""")
DEFINITIONS = {name: DEFINITIONS[name] for name in ("fulfilment", "order", "order_reviewed", "refund")}
