-- wrk script of the numbered-steps benchmark (nexus_lab.bench.mcp_steps): one step per request, the
-- gateway numbers it. mode "rest": POST /v1/orders/{id}/steps; mode "mcp": POST /mcp, a JSON-RPC
-- tools/call of propose_step. Run with one connection per thread (-t N -c N): each connection proposes its
-- own orders' five steps in order (plans made beforehand: order_id = <run>-<thread>-<n>), each step with an
-- idempotency key (a request resent after a reconnect is answered DUPLICATE, not applied twice).
-- Arguments (after --): run id, Authorization header value, mode ("rest" | "mcp").

local STEPS = {"OrderCreated", "InventoryValidated", "PaymentProcessed", "OrderShipped", "OrderCompleted"}
local threads = {}
local counter = 0
local run = "00000000"
local mode = "rest"
local rpc_id = 0

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

function init(args)
  run = args[1] or run
  mode = args[3] or mode
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  if args[2] ~= nil and args[2] ~= "" then
    wrk.headers["Authorization"] = args[2]
  end
end

local ITEMS = '[{"product_id":"prod_a","quantity":2,"unit_price":"3.50"},' ..
  '{"product_id":"prod_b","quantity":1,"unit_price":"3.00"}]'
DATA = {
  [1] = '{"user_id":"u1","items":' .. ITEMS .. ',"total_amount":"10.00","currency":"USD"}',
  [2] = '{"warehouse_id":"wh","reserved_items":' .. ITEMS .. '}',
  [3] = '{"payment_id":"pay","amount":"10.00","currency":"USD"}',
}

function request()
  local order = math.floor(counter / 5)
  local seq = counter % 5 + 1
  local order_id = string.format("%s-%d-%d", run, thread_id, order)
  local step = string.format('{"order_id":"%s","step":"%s","data":%s,"idempotency_key":"k%d"}',
    order_id, STEPS[seq], DATA[seq] or "{}", seq)
  if mode == "mcp" then
    rpc_id = rpc_id + 1
    local body = string.format(
      '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"propose_step","arguments":%s}}',
      rpc_id, step)
    return wrk.format(nil, "/mcp", nil, body)
  end
  local body = string.format('{"step":"%s","data":%s,"idempotency_key":"k%d"}', STEPS[seq], DATA[seq] or "{}", seq)
  return wrk.format(nil, "/v1/orders/" .. order_id .. "/steps", nil, body)
end

function response(status, headers, body)
  counter = counter + 1
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'NEXUS_WRK {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f,' ..
    '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
